"""The engine with `quantization="fp8"` on the CPU (the torch reference GEMM): constrained beam
requests return catalog SIDs only, ordinary requests run, and the option is checked wherever it
is set (EngineConfig, the decoder's settings and serve flag, `widebeam generate`)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

import pytest
from pydantic import ValidationError

from tests.services.decoder.conftest import SidModel
from widebeam.cli import build_parser
from widebeam.services.decoder.config import EngineConfig, Quantization
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.server.cli import settings_from_args
from widebeam.services.decoder.server.settings import DecoderSettings


def _illegal_beams(engine: Engine, sid_model: SidModel, outputs: list[RequestOutput]) -> int:
    """Beams whose tokens are not `[begin] codes [end]` of a catalog SID with its items."""
    layout = engine.sid_layout
    assert layout is not None
    items: dict[tuple[int, ...], set[str]] = defaultdict(set)
    for item_id, sid in sid_model.catalog:
        items[tuple(lv.base + c for lv, c in zip(layout.levels, sid, strict=True))].add(item_id)
    illegal = 0
    for out in outputs:
        assert out.error is None, out.error
        assert out.beams
        for beam in out.beams:
            ids = list(beam.output_ids)
            if ids and ids[0] == layout.begin_token_id:
                ids = ids[1:]
            codes, tail = tuple(ids[: len(layout.levels)]), ids[len(layout.levels) :]
            legal = codes in items and tail[:1] == [layout.end_token_id]
            illegal += not (legal and set(beam.item_ids or ()) == items[codes])
    return illegal


def _constrained(i: int, width: int) -> GenerationRequest:
    return GenerationRequest(
        f"fp8-{i}",
        tuple(range(3 + i, 9 + 2 * i)),
        beam_width=width,
        n=width,
        max_new_tokens=5,
        eos_token_id=(),
        constrained=True,
    )


@pytest.mark.parametrize("beam_expansion", ["streamed", "dense"])
def test_fp8_constrained_beams_are_catalog_sids(sid_model: SidModel, beam_expansion: str) -> None:
    engine = sid_model.engine(
        quantization="fp8", beam_expansion=beam_expansion, dense_expansion_limit=0
    )
    assert engine.model.quantization == Quantization.FP8
    requests = [_constrained(i, width) for i, width in enumerate((1, 4, 16, 32))]
    outputs = engine.generate(requests)
    assert [len(o.beams) for o in outputs] == [1, 4, 16, 32]
    assert _illegal_beams(engine, sid_model, outputs) == 0


def test_fp8_unconstrained_requests_run(sid_model: SidModel) -> None:
    engine = sid_model.engine(quantization="fp8")
    greedy = GenerationRequest("g", (1, 2, 3), max_new_tokens=4, eos_token_id=())
    beams = GenerationRequest("b", (4, 5), beam_width=4, n=2, max_new_tokens=3, eos_token_id=())
    out_greedy, out_beams = engine.generate([greedy, beams])
    assert len(out_greedy.beams[0].output_ids) == 4
    assert len(out_beams.beams) == 2 and all(len(b.output_ids) == 3 for b in out_beams.beams)


def test_bad_quantization_values_are_named() -> None:
    with pytest.raises(ValueError, match="quantization must be one of none, fp8, got 'int4'"):
        EngineConfig(model_dir="/m", quantization="int4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="quantization fp8 on CUDA needs dtype bfloat16"):
        EngineConfig(model_dir="/m", device="cuda", quantization="fp8")  # type: ignore[arg-type]
    config = EngineConfig(model_dir="/m", quantization="fp8")  # type: ignore[arg-type]
    assert config.quantization is Quantization.FP8
    assert EngineConfig(model_dir="/m").quantization is Quantization.NONE


def test_a_model_loaded_otherwise_is_refused(sid_model: SidModel) -> None:
    model = CausalLM.from_pretrained(sid_model.model_dir)
    with pytest.raises(
        ValueError, match=r"loaded with quantization 'none', the config asks for 'fp8'"
    ):
        Engine(sid_model.engine_config(quantization="fp8"), model=model)


def test_decoder_setting_and_serve_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIDEBEAM_DECODER_MODEL", "/m")
    monkeypatch.setenv("WIDEBEAM_DECODER_QUANTIZATION", "fp8")
    assert DecoderSettings().engine_config().quantization is Quantization.FP8
    args = build_parser().parse_args(["decoder", "serve", "--quantization", "none"])
    assert settings_from_args(args).engine_config().quantization is Quantization.NONE
    monkeypatch.setenv("WIDEBEAM_DECODER_QUANTIZATION", "int8")
    with pytest.raises(ValidationError, match="quantization"):
        DecoderSettings()


def _generate(sid_model: SidModel, *flags: str, stdin: str) -> subprocess.CompletedProcess:
    model = ["--model", str(sid_model.model_dir), "--catalog", str(sid_model.catalog_path)]
    return subprocess.run(
        [sys.executable, "-m", "widebeam", "generate", *model, *flags],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "flags",
    [("--quantization", "fp8"), ("--quantization", "fp8", "--head-quantization", "fp8")],
)
def test_widebeam_generate_quantization_flag(sid_model: SidModel, flags: tuple[str, ...]) -> None:
    line = {
        "id": "sid",
        "input_ids": [5, 6],
        "beam_width": 8,
        "n": 8,
        "max_new_tokens": 5,
        "eos_token_id": [],
        "constrained": True,
    }
    proc = _generate(sid_model, *flags, stdin=json.dumps(line) + "\n")
    assert proc.returncode == 0, proc.stderr
    [row] = [json.loads(x) for x in proc.stdout.splitlines()]
    assert len(row["beams"]) == 8 and all(b["item_ids"] for b in row["beams"])
    bad = _generate(sid_model, "--quantization", "int4", stdin="")
    assert bad.returncode == 2 and "--quantization: invalid choice: 'int4'" in bad.stderr
