"""The optional FlashInfer cascade backend: a clear error without the package; on a GPU with
it, the same outputs as the torch reference at serving shapes."""

from __future__ import annotations

import pytest
import torch

from tests.kernels.attention.cases import decode_case, tolerance
from widebeam.kernels.attention.factory import make_attention_backend
from widebeam.kernels.attention.flashinfer_backend import flashinfer_available
from widebeam.kernels.attention.torch_ref import cascade_decode

DECODE = {  # id: groups as (rows, prompt_len, suffix_len)
    "beam256-prompt1000": [(256, 1000, 3)],
    "beam5000-prompt64-suffix16": [(5000, 64, 16)],
    "ragged": [(256, 1000, 3), (1, 5000, 17), (50, 300, 128), (7, 1, 1)],
}


@pytest.mark.skipif(flashinfer_available(), reason="flashinfer is installed here")
def test_missing_package_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="needs the flashinfer package"):
        make_attention_backend("flashinfer")


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(DECODE))
def test_decode_matches_reference(name: str) -> None:
    pytest.importorskip("flashinfer")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    case = decode_case(
        DECODE[name], q_heads=16, kv_heads=8, dim=128, dtype=torch.bfloat16,
        device=torch.device("cuda"), seed=list(DECODE).index(name),
    )  # fmt: skip
    backend = make_attention_backend("flashinfer")
    expected = cascade_decode(case.q, case.k_cache, case.v_cache, case.batch, 128**-0.5)
    for _ in range(2):  # the second call reuses the step's plan
        out = backend.decode(case.q, case.k_cache, case.v_cache, case.batch, 128**-0.5)
        torch.testing.assert_close(out.float(), expected.float(), **tolerance(torch.bfloat16))


@pytest.mark.gpu
def test_rows_must_be_back_to_back() -> None:
    pytest.importorskip("flashinfer")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    case = decode_case(
        [(4, 10, 2)], q_heads=16, kv_heads=8, dim=128, dtype=torch.bfloat16,
        device=torch.device("cuda"), seed=0, pad_rows=2,
    )  # fmt: skip
    with pytest.raises(ValueError, match="back to back"):
        make_attention_backend("flashinfer").decode(
            case.q, case.k_cache, case.v_cache, case.batch, 128**-0.5
        )
