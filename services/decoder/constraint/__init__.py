"""The SID-trie constraint on the device: a catalog trie as tensors — allowed tokens and masks
per row, the node advance of a step's rows (`trie_constraint.py`) — the host-side lookup of
a finished path's catalog items (`path_items.py`), and the item id -> SID index of a catalog
version that item histories are resolved with (`item_sid_index.py`)."""
