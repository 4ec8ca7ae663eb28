"""Semantic IDs for a catalog by residual k-means (RQ-KMeans) over item embeddings.

``build_sids(embeddings, codebook_sizes=(256, 256, 256), seed=0)`` returns a
:class:`SidAssignment` (``codes [N, L] int64``, the fitted codebooks and :class:`SidStats`);
``encode`` assigns new items under fitted codebooks. Collisions are resolved by moving items to
the nearest unused last-level code (see :mod:`.dedupe`). ``widebeam catalog build-sids`` (see
:mod:`.cli`) runs it on ``.npy`` / Parquet embeddings and writes a native JSONL catalog.
"""

from widebeam.services.catalog.sids.rq import SidAssignment, SidStats, build_sids, encode

__all__ = ["SidAssignment", "SidStats", "build_sids", "encode"]
