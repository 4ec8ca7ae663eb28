"""`widebeam up`: the whole stack on one machine as child processes (used by `make demo`) —
`up.py` the command, `children.py` / `readiness.py` / `restart_policy.py` the supervision,
`ports.py` the default ports, `redis_state.py` Redis's persistence, `summary.py` the table of
URLs, `widths.py` the beam limits handed to the children, `gateway_options.py` the gateway's
items file and model names."""
