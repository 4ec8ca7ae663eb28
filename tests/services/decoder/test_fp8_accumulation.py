"""`fp8_accumulation` (fast | precise): how the FP8 GEMMs sum their products on CUDA. Checked on
the CPU wherever it is set (EngineConfig, the decoder's setting and serve flag, `widebeam
generate`, the bench harness), that it reaches `torch._scaled_mm(use_fast_accum=...)` on the
CUDA path (torch._scaled_mm and the device capability stood in for), and that the CPU reference
is unaffected: both values give the same answers bit for bit there."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.digest import digest
from tests.services.decoder.test_fp8_engine import _constrained
from widebeam.cli import build_parser
from widebeam.kernels.fp8 import backend
from widebeam.kernels.fp8.quantize import quantize_rows, quantize_weight
from widebeam.services.decoder.config import EngineConfig, Fp8Accumulation
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.server.cli import settings_from_args
from widebeam.services.decoder.server.settings import DecoderSettings

BENCH = Path(__file__).resolve().parents[3] / "bench"


def test_engine_config_default_and_bad_values() -> None:
    assert EngineConfig(model_dir="/m").fp8_accumulation is Fp8Accumulation.FAST
    config = EngineConfig(model_dir="/m", fp8_accumulation="precise")  # type: ignore[arg-type]
    assert config.fp8_accumulation is Fp8Accumulation.PRECISE
    with pytest.raises(
        ValueError, match="fp8_accumulation must be one of fast, precise, got 'fp32'"
    ):
        EngineConfig(model_dir="/m", fp8_accumulation="fp32")  # type: ignore[arg-type]


def test_decoder_setting_and_serve_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIDEBEAM_DECODER_MODEL", "/m")
    monkeypatch.setenv("WIDEBEAM_DECODER_FP8_ACCUMULATION", "precise")
    assert DecoderSettings().engine_config().fp8_accumulation is Fp8Accumulation.PRECISE
    args = build_parser().parse_args(["decoder", "serve", "--fp8-accumulation", "fast"])
    assert settings_from_args(args).engine_config().fp8_accumulation is Fp8Accumulation.FAST
    monkeypatch.setenv("WIDEBEAM_DECODER_FP8_ACCUMULATION", "sloppy")
    with pytest.raises(ValidationError, match="fp8_accumulation"):
        DecoderSettings()


def test_widebeam_generate_flag(
    sid_model: SidModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    requests, answers = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    requests.write_text(
        '{"id": "sid", "input_ids": [5, 6], "beam_width": 4, "n": 4, "max_new_tokens": 5, '
        '"eos_token_id": [], "constrained": true}\n'
    )
    model = ["--model", str(sid_model.model_dir), "--catalog", str(sid_model.catalog_path)]
    files = ["--input", str(requests), "--output", str(answers)]
    fp8 = ["--quantization", "fp8", "--fp8-accumulation", "precise"]
    args = build_parser().parse_args(["generate", *model, *files, *fp8])
    assert args.fp8_accumulation == "precise" and args.handler(args) == 0
    [row] = [json.loads(line) for line in answers.read_text().splitlines()]
    assert len(row["beams"]) == 4 and all(b["item_ids"] for b in row["beams"])
    with pytest.raises(SystemExit) as bad:
        build_parser().parse_args(["generate", *model, "--fp8-accumulation", "tf32"])
    assert bad.value.code == 2
    assert "--fp8-accumulation: invalid choice: 'tf32'" in capsys.readouterr().err


def test_bench_harness_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import harness

    parser = argparse.ArgumentParser()
    harness.add_engine_args(parser)
    args = parser.parse_args(
        ["--quantization", "fp8", "--fp8-accumulation", "precise", "--head-quantization", "fp8"]
    )
    assert harness.engine_options(args)["fp8_accumulation"] == "precise"
    assert harness.load_options(args) == {
        "quantization": "fp8",
        "fp8_accumulation": "precise",
        "head_quantization": "fp8",
    }
    assert parser.parse_args([]).fp8_accumulation == "fast"


def test_the_cpu_reference_is_the_same_either_way(sid_model: SidModel) -> None:
    outputs = {}
    for accumulation in ("fast", "precise"):
        engine = sid_model.engine(quantization="fp8", fp8_accumulation=accumulation)
        assert engine.model.fp8_accumulation == accumulation
        assert engine.model.model.layers[0].mlp.down_proj.gemm is backend.TORCH_REFERENCE
        outputs[accumulation] = digest(engine.generate([_constrained(i, 8) for i in range(3)]))
    assert outputs["fast"] == outputs["precise"]


def test_a_model_loaded_with_the_other_accumulation_is_refused(sid_model: SidModel) -> None:
    model = CausalLM.from_pretrained(
        sid_model.model_dir, quantization="fp8", fp8_accumulation="precise"
    )
    with pytest.raises(ValueError, match="fp8_accumulation 'precise', the config asks for 'fast'"):
        Engine(sid_model.engine_config(quantization="fp8"), model=model)
    with pytest.raises(ValueError, match="fp8_accumulation must be one of fast, precise"):
        CausalLM.from_pretrained(sid_model.model_dir, quantization="fp8", fp8_accumulation="x")


def test_the_cuda_path_passes_use_fast_accum(monkeypatch: pytest.MonkeyPatch) -> None:
    """fp8_gemm_for on a CUDA device (capability stood in for: 9.0) picks the path, and the
    path hands torch._scaled_mm its use_fast_accum; the CPU's path is the reference either
    way."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    cuda = torch.device("cuda")
    assert backend.fp8_gemm_for(cuda, torch.bfloat16) is backend.SCALED_MM
    assert backend.fp8_gemm_for(cuda, torch.bfloat16, fast_accum=True) is backend.SCALED_MM_FAST
    for fast in (False, True):
        assert backend.fp8_gemm_for(torch.device("cpu"), torch.bfloat16, fast) is (
            backend.TORCH_REFERENCE
        )
    calls: list[bool] = []

    def scaled_mm(a: torch.Tensor, b: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        calls.append(kwargs["use_fast_accum"])
        return torch.zeros(a.shape[0], b.shape[1], dtype=kwargs["out_dtype"])

    monkeypatch.setattr(torch, "_scaled_mm", scaled_mm)
    weight = quantize_weight(torch.randn(32, 64))
    rows = quantize_rows(torch.randn(4, 64))
    for gemm in (backend.SCALED_MM, backend.SCALED_MM_FAST):
        assert gemm.matmul(rows, weight, None, torch.bfloat16).shape == (4, 32)
    assert calls == [False, True]


def test_listed_shapes_keep_the_accumulation_on_the_triton_gemm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """gemm_for_weight: a shape listed in TRITON_FROM_ROWS runs the Triton GEMM with promoted
    accumulation under SCALED_MM and fast under SCALED_MM_FAST (from its row count)."""
    weight = quantize_weight(torch.randn(48, 64))
    monkeypatch.setitem(backend.TRITON_FROM_ROWS, (48, 64), 8)
    monkeypatch.setattr(backend, "_triton_matmul", lambda: object())
    triton_calls: list[bool] = []
    monkeypatch.setattr(
        backend,
        "_triton_rows",
        lambda rows, w, bias, dtype, precise=False: triton_calls.append(precise) or "triton",
    )
    for gemm, precise in ((backend.SCALED_MM, True), (backend.SCALED_MM_FAST, False)):
        chosen = backend.gemm_for_weight(gemm, weight)
        assert chosen.name == f"{gemm.name}|triton>=8"
        assert chosen.matmul(quantize_rows(torch.randn(8, 64)), weight, None, torch.bfloat16) == (
            "triton"
        )
        assert triton_calls[-1] is precise
    assert backend.gemm_for_weight(backend.TORCH_REFERENCE, weight) is backend.TORCH_REFERENCE
