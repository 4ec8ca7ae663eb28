"""Helpers shared by the test suites: real servers and processes on free ports, raw clients,
throwaway TLS certificates made with openssl (`tls_certs.py`); each module says what it holds."""
