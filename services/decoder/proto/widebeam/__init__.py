"""Proto package root `widebeam` (the folders mirror the proto package names)."""
