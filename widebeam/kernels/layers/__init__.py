"""Fused elementwise layers of the decoder (RMSNorm, residual add + RMSNorm, SiLU-gated product,
q/k norm + rope), each with its torch reference and a dispatcher."""
