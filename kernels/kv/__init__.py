"""Writes into the paged KV cache: a batch's new K and V rows scattered to their slots."""
