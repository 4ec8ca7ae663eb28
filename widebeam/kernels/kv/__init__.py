"""Writes into the paged KV cache: a batch's new K and V rows scattered to their slots
(`kv_write.py`, `triton_kv_write.py`), quantized on the way for an FP8 cache (`fp8_kv.py`: the
storage format, its per-head scales, the reference quantization)."""
