"""The services, installed as `widebeam.services`: the decoder (`decoder/`: engine and gRPC
server), the catalog (`catalog/`: formats, trie, Redis store, HTTP service), the REST gateway
(`gateway/`), the HTTP convention the gateway and the catalog service share (`http/`), and
`started_in_with.py`, the one way a background component (a thread, a server) is started and
stopped by a `with` block."""
