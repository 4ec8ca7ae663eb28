"""The catalog name a request means when it names none: the gateway's default, the name a
decoder serves its `--catalog` file under, and the one `widebeam up` uploads to."""

from __future__ import annotations

DEFAULT_CATALOG = "default"
