"""Fused elementwise layers of the decoder (RMSNorm, SiLU-gated product)."""
