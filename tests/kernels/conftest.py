"""Triton kernels on the CPU: run them in Triton's interpreter (TRITON_INTERPRET=1).

`triton.jit` reads TRITON_INTERPRET when a kernel is *decorated*, i.e. when our kernel modules
are imported; `factory` imports them lazily, so setting the variable here, before any test of
this directory imports them, is early enough. With CUDA present the same tests run compiled.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _fix_interpreter_scalar_index() -> None:
    """Triton 3.6's interpreter turns loaded scalars into 1-element arrays and calls int() on
    them for `range(start, end)`; numpy >= 2.4 refuses that (triton-lang/triton#9171, fixed
    upstream after 3.6). Same patch as upstream: squeeze before int()."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "widebeam_fixed", False):
        return

    def patched(tensor: object, scope: interpreter._LangPatchScope) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patched.widebeam_fixed = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patched


def _fix_interpreter_fma() -> None:
    """Triton 3.6's interpreter computes `tl.fma(x, y, z)` as `x * y + z` in the operands'
    dtype, two roundings; compiled Triton emits a fused multiply-add (`fma.rn.f32`), one. The
    FP8 quantization's exact division (`triton_quantize._to_fp8`) relies on the fused one, so
    fp32 fmas are computed exactly here: the product in float64 (exact for fp32 operands), the
    sum's rounding error by TwoSum, and a float64 sum that lands exactly halfway between two
    fp32 values moved towards the exact one before it is rounded to fp32."""
    import numpy as np
    from triton.runtime import interpreter

    original = interpreter.InterpreterBuilder.create_fma
    if getattr(original, "widebeam_fixed", False):
        return

    def exact_fma(self: object, x: object, y: object, z: object) -> object:
        if any(np.asarray(t.data).dtype != np.float32 for t in (x, y, z)):  # type: ignore[attr-defined]
            return original(self, x, y, z)
        a = np.asarray(x.data, dtype=np.float64)  # type: ignore[attr-defined]
        b = np.asarray(y.data, dtype=np.float64)  # type: ignore[attr-defined]
        c = np.asarray(z.data, dtype=np.float64)  # type: ignore[attr-defined]
        product = a * b
        total = product + c
        back = total - product
        error = (product - (total - back)) + (c - back)  # total + error: the exact sum
        rounded = total.astype(np.float32)
        nearest = rounded.astype(np.float64)
        side = np.where(total > nearest, np.float32(np.inf), np.float32(-np.inf))
        other = np.nextafter(rounded, side).astype(np.float64)
        halfway = (total != nearest) & (total == (nearest + other) / 2)
        towards_other = np.sign(error) == np.sign(other - nearest)
        exact = np.where(halfway & (error != 0) & towards_other, other, nearest)
        return interpreter.TensorHandle(exact.astype(np.float32), z.dtype.scalar)  # type: ignore[attr-defined]

    exact_fma.widebeam_fixed = True  # type: ignore[attr-defined]
    interpreter.InterpreterBuilder.create_fma = exact_fma


@pytest.fixture(scope="session")
def kernel_device() -> torch.device:
    """Where the Triton tests put their tensors: CUDA, or the CPU under the interpreter.

    Skips (with the reason) when triton is missing or the kernels were already compiled for a
    GPU that is not here (another module imported them before this conftest set the variable).
    """
    triton = pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
    from widebeam.kernels.attention import triton_prefix

    if torch.cuda.is_available():
        return torch.device("cuda")
    if isinstance(triton.language.cdiv, triton.runtime.JITFunction):
        # Not a skip: nothing but a test module collected before this directory importing
        # triton at module level does this, and every interpreted kernel would then fail
        pytest.fail(
            "triton was imported before this conftest set TRITON_INTERPRET=1 (a test module "
            "collected earlier imports it at module level): triton.language's own jit "
            "functions (tl.cdiv, ...) cannot run in the interpreter"
        )
    if isinstance(triton_prefix.prefix_kernel, triton.runtime.JITFunction):
        pytest.skip("triton kernels were decorated before TRITON_INTERPRET=1 was set")
    _fix_interpreter_scalar_index()
    _fix_interpreter_fma()
    return torch.device("cpu")


from tests.services.decoder.conftest import sid_model  # noqa: E402, F401 (fixture)
