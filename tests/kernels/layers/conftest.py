"""Interpreter fidelity for the bit-parity tests of the layer kernels."""

from __future__ import annotations

import numpy as np
import pytest
import torch


@pytest.fixture
def exact_device(kernel_device: torch.device, monkeypatch: pytest.MonkeyPatch) -> torch.device:
    """``kernel_device``, with the interpreter's fp32 -> bf16 casts rounded to nearest even.

    Compiled Triton lowers ``x.to(tl.bfloat16)`` to a round-to-nearest-even conversion (as
    PyTorch's casts do), but Triton 3.6's interpreter truncates it (``cast_impl`` passes no
    rounding mode to ``_convert_float``; its RTNE branch rounds half up and drops the carry). Bit
    parity with the torch reference in bf16 needs the GPU's rounding, so emulate it with torch.
    """
    if kernel_device.type == "cuda":
        return kernel_device
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter._convert_float

    def convert(data: np.ndarray, src: object, dst: object, rounding_mode: object) -> np.ndarray:
        if src != tl.float32 or dst != tl.bfloat16:
            return original(data, src, dst, rounding_mode)
        as_fp32 = torch.from_numpy(np.ascontiguousarray(data).view(np.float32))
        return as_fp32.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)

    monkeypatch.setattr(interpreter, "_convert_float", convert)
    return kernel_device
