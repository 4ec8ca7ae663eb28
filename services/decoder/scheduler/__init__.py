"""Admission policy in plain Python (no tensors): FIFO under a row budget, a KV-slot budget
reserved for a request's whole life (its cached prompt prefix shared, `kv/prefix_cache.py`),
and a prefill-token budget per step (`scheduler.py`); and
the decoder's admission by predicted wait — queued rows x steps over a running throughput
estimate, shed at once past the request's budget with a Retry-After (`wait_prediction.py`)."""
