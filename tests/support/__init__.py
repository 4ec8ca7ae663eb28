"""Helpers shared by the test suites: real servers and processes on free ports (`redis_server.py`,
`served_redis.py` for fixtures, `service_process.py`, `child_process.py` to stop them), a child's
output waited on line by line (`output_lines.py`), raw clients (`raw_http.py`) and the
slow-client checks both HTTP services share (`client_guard.py`), throwaway TLS certificates made
with openssl (`tls_certs.py`); each module says what it holds."""
