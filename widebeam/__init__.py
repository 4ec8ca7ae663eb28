"""The `widebeam` command and what it runs outside the services: the CLI (`cli.py`,
`settings_cli.py`: every service's settings as flags), the one-command stack (`launcher/`:
`widebeam up`), the demo recommender's build and showcase (`demo/`, `showcase.py`), offline
evaluation against a gateway (`eval/`) and the load generator (`loadgen/`). The services
(`services/`) and kernels (`kernels/`) are mapped into this package as `widebeam.services` and
`widebeam.kernels` (setup.py)."""
