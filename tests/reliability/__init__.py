"""The reliability suite (docs/reliability.md): bad input (`test_bad_input_*`), security
(`test_security_*`), faults injected into running services (`test_faults_*`) and load
(`test_load.py`), every part a real process or server. Their helpers: `support.py` (services on
free ports, child processes, a password/TLS redis-server), `faults_support.py` (tallying client
threads, a redis-server kept over restarts), `batch_job.py` (one batch job watched, awaited and
checked row by row) and `load_support.py` (the load tests' stack)."""
