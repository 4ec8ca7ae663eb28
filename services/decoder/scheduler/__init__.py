"""Admission policy in plain Python (no tensors): FIFO under a row budget, a KV-slot budget
reserved for a request's whole life, and a prefill-token budget per step (`scheduler.py`)."""
