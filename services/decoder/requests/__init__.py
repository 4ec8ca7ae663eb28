"""What callers exchange with the engine, in plain Python (no torch): the request spec
(`spec.py`), parsing a request dict from a JSONL line or an RPC body (`parsing.py`), the checks
against the model, the engine's limits and the catalog that resolve it (`validation.py`), and
what comes back (`results.py`)."""
