"""Who may call the decoder's gRPC port, for its server and its clients alike: the shared bearer
token's settings (`bearer_token.py`), TLS credentials from PEM files (`tls.py`), and the clients'
settings and channels (`client.py`: the gateway's pool, the batch worker, the benches). The
server's side of the check is `server/token_auth.py`."""
