"""The KV cache: its slot storage (`kv_cache.py`), the page allocator requests reserve slots
from at admission (`page_allocator.py`), and how many slots there are (`kv_capacity.py`: the
configured count or a fraction of the free CUDA memory)."""
