"""The FP8 GEMMs: quantization, the torch reference, torch._scaled_mm."""
