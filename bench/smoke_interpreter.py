"""A bench script's `--smoke` run without CUDA runs the Triton kernels in Triton's interpreter.

`triton.jit` reads TRITON_INTERPRET when a kernel is decorated, i.e. when the kernel modules are
imported, so a script calls `use_interpreter_for_smoke()` before it imports any of them.
"""

from __future__ import annotations

import os
import sys

import torch


def use_interpreter_for_smoke() -> bool:
    """True (and the interpreter set up) when this run is `--smoke` on a machine without CUDA."""
    smoke = "--smoke" in sys.argv and not torch.cuda.is_available()
    if smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        _fix_scalar_index()
    return smoke


def _fix_scalar_index() -> None:
    """Triton 3.6's interpreter calls int() on 1-element arrays for `range` bounds loaded from
    memory; numpy >= 2.4 refuses (triton-lang/triton#9171). Same fix as tests/kernels/conftest."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor

    def patched(tensor: object, scope: object) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    interpreter._patch_lang_tensor = patched
