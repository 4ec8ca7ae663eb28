"""The decoder's gRPC service: `widebeam decoder serve` (see `app.py`)."""
