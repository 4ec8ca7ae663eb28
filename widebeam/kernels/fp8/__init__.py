"""W8A8 FP8 linear layers: weights in float8_e4m3fn with one fp32 scale per output channel,
activations quantized per token (one scale per row, from its amax) at each call. `quantize.py`
holds the quantization, `torch_ref.py` the plain-torch reference (quantize, dequantize, matmul:
the CPU path and the oracle), `scaled_mm.py` the CUDA path through `torch._scaled_mm` with
row-wise scales (its activations quantized to the same values in one Triton pass,
`triton_quantize.py`), and `backend.py` the one place that picks a path by device."""
