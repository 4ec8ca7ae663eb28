"""Proto package `widebeam.decoder`: the decoder service's versions."""
