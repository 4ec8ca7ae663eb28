"""The decoder's GPU kernels, imported as `widebeam.kernels`: attention over the paged KV cache
with its backends (`attention/`: the torch reference, Triton and FlashInfer, each owning its
metadata and CUDA-graph hooks), the beam step's logits statistics (`beam/`), the KV write
(`kv/`), fused elementwise layers (`layers/`) and the W8A8 FP8 linear (`fp8/`). Every kernel
has a plain-torch reference beside it, which is the CPU path and what the kernel tests compare
against."""
