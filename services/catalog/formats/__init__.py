"""Catalog input formats: JSONL, CSV, Parquet, FlashRec JSON, OpenOneRec sid2pid.json (+ gzip).

``load_catalog`` auto-detects the format, parses it to a ``CatalogTable`` and validates it;
every failure is a ``CatalogError`` whose message names the line / row / key at fault.
Items sharing a SID are kept by popularity, highest first (ties: input order); build tries
from ``table.sorted_for_trie()`` or with ``build_trie(table, layout)``; ``load_trie`` does
load + build in one call and is what both the catalog service and the decoder's catalog file
use. JSONL is read in chunks of whole lines, plain ones through pyarrow (``jsonl_fast``).
"""

from widebeam.services.catalog.formats.csv_table import parse_csv
from widebeam.services.catalog.formats.flashrec import parse_flashrec
from widebeam.services.catalog.formats.jsonl_table import parse_jsonl
from widebeam.services.catalog.formats.load import FORMATS, load_catalog
from widebeam.services.catalog.formats.parquet_table import parse_parquet
from widebeam.services.catalog.formats.sid2pid import infer_codebook_size, parse_sid2pid
from widebeam.services.catalog.formats.source import DEFAULT_MAX_BYTES
from widebeam.services.catalog.formats.table import CatalogTable
from widebeam.services.catalog.formats.trie_from_table import build_trie, load_trie
from widebeam.services.catalog.formats.validate import validate_table
from widebeam.services.catalog.types import CatalogError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "FORMATS",
    "CatalogError",
    "CatalogTable",
    "build_trie",
    "infer_codebook_size",
    "load_catalog",
    "load_trie",
    "parse_csv",
    "parse_flashrec",
    "parse_jsonl",
    "parse_parquet",
    "parse_sid2pid",
    "validate_table",
]
