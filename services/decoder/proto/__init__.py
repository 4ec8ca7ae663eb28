"""The decoder's gRPC contract: the `.proto` files under `widebeam/decoder/v1/` (the folders
mirror the proto package, as protoc requires), their checked-in generated stubs, and
`generate.py`, which regenerates them (a test checks they are current)."""
