"""Kernels of the beam step: per-row log-sum-exp and block maxima of a logits matrix."""
