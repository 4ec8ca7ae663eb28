"""Proto package `widebeam.decoder.v1`: `decoder.proto` and its generated `*_pb2*` stubs."""
