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
    if isinstance(triton_prefix.prefix_kernel, triton.runtime.JITFunction):
        pytest.skip("triton kernels were decorated before TRITON_INTERPRET=1 was set")
    _fix_interpreter_scalar_index()
    return torch.device("cpu")


from tests.services.decoder.conftest import sid_model  # noqa: E402, F401 (fixture)
