"""The KV cache: its slot storage (`kv_cache.py`: in the model dtype or FP8), the page allocator
requests reserve slots from at admission (`page_allocator.py`), how many slots there are
(`kv_capacity.py`: the configured count or a fraction of the free CUDA memory, in the storage
dtype's bytes; `start_up_memory.py`: what start-up says when the rest is too little), and the
prompt-prefix cache: the radix tree of cached prompt pages
(`prefix_tree.py`) and the reservations that share them (`prefix_cache.py`,
`kv_reservation.py`)."""
