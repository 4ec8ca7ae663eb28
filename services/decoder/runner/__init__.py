"""The model runner: prefill and decode forwards over the KV cache (`model_runner.py`), the
attention contexts the model calls per layer, and the CUDA-graph paths — bucketed decode
steps, prefill batches and beam expansions with their static buffers. Attention backends are
driven only through their metadata and graph hooks (`kernels/attention/base.py`)."""
