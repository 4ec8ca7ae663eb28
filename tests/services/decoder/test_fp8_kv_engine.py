"""The engine with `kv_dtype="fp8"` on the CPU (the torch reference attention): K and V stored in
float8_e4m3fn with static per-head scales. Constrained beams are catalog SIDs only; answers
mostly agree with the model-dtype cache; batching, the prefix cache and saturated values change
nothing they should not; the cache holds twice bfloat16's slots in the same bytes; and the
option is checked wherever it is set (EngineConfig, the decoder's settings and serve flag,
`widebeam generate`).

Within FP8, requests alone and batched, and prefix hits and misses, are compared as the
model-dtype tests compare them (`test_batching_invariance.py`, `test_prefix_cache.py`): the same
sequences and items, scores to FP8_SCORE_TOL. An fp32 GEMM's rounding of a row can depend on how
many rows it multiplies, and a K or V value that lands on an e4m3 rounding boundary then stores
one FP8 step (1/8 of itself) apart: rare, and worth ~1e-3 of a score when it happens."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.test_batching_invariance import _mixed_requests
from tests.services.decoder.test_fp8_engine import _constrained, _illegal_beams
from tests.services.decoder.test_prefix_cache import _one_by_one
from tests.services.decoder.test_prefix_cache import _requests as _prefix_requests
from widebeam.cli import build_parser
from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE, KvScales
from widebeam.services.decoder.config import EngineConfig, KVDType
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.server.cli import settings_from_args
from widebeam.services.decoder.server.settings import DecoderSettings

FP8_SCORE_TOL = 5e-3


def _same_answers(a: list[RequestOutput], b: list[RequestOutput]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.error is None and y.error is None, (x.error, y.error)
        assert [r.output_ids for r in x.beams] == [r.output_ids for r in y.beams], x.request_id
        assert [r.item_ids for r in x.beams] == [r.item_ids for r in y.beams]
        for r, s in zip(x.beams, y.beams, strict=True):
            assert r.score == pytest.approx(s.score, abs=FP8_SCORE_TOL)


@pytest.fixture(scope="module")
def fp8_engine(sid_model: SidModel) -> Engine:
    return sid_model.engine(kv_dtype="fp8", max_rows=40)


@pytest.mark.parametrize("beam_expansion", ["streamed", "dense"])
def test_constrained_beams_are_catalog_sids(sid_model: SidModel, beam_expansion: str) -> None:
    engine = sid_model.engine(
        kv_dtype="fp8", beam_expansion=beam_expansion, dense_expansion_limit=0
    )
    cache = engine.runner.cache
    assert cache.k.dtype == cache.v.dtype == KV_FP8_DTYPE
    requests = [_constrained(i, width) for i, width in enumerate((1, 4, 16, 32))]
    outputs = engine.generate(requests)
    assert [len(o.beams) for o in outputs] == [1, 4, 16, 32]
    assert _illegal_beams(engine, sid_model, outputs) == 0


def test_answers_mostly_agree_with_the_model_dtype_cache(
    sid_model: SidModel, fp8_engine: Engine
) -> None:
    """Beam, greedy and constrained requests (sampled ones may draw another token at any step):
    most best sequences are the same, the sequences of a request overlap (as sets) and the best
    score moves by little. The tiny random model's SID scores are nearly tied (-log 16^3
    each), so exact orders are not compared."""
    auto = sid_model.engine(max_rows=40)
    begin = auto.sid_layout.begin_token_id
    requests = [
        r
        for seed in (3, 5)
        for r in _mixed_requests(seed, begin)
        if not r.request_id.startswith("sample")
    ]
    requests = [dataclasses.replace(r, request_id=f"{i}") for i, r in enumerate(requests)]
    same_best = shared = total = 0
    for ours, theirs in zip(fp8_engine.generate(requests), auto.generate(requests), strict=True):
        assert ours.error is None and theirs.error is None
        mine, reference = ([tuple(b.output_ids) for b in o.beams] for o in (ours, theirs))
        same_best += mine[0] == reference[0]
        shared += len(set(mine) & set(reference))
        total += len(mine)
        best = max(b.score for b in theirs.beams)
        assert max(b.score for b in ours.beams) == pytest.approx(best, abs=0.3)
    assert same_best >= 0.75 * len(requests), (same_best, len(requests))
    assert shared >= 0.75 * total, (shared, total)


def test_batched_equals_alone(fp8_engine: Engine) -> None:
    requests = _mixed_requests(5, fp8_engine.sid_layout.begin_token_id)
    together = fp8_engine.generate(requests)
    _same_answers([fp8_engine.generate([req])[0] for req in requests], together)


@pytest.mark.parametrize(("fp8_queries", "fp8_probabilities"), [(False, False), (True, True)])
def test_prefix_hits_give_the_answers_of_misses(
    sid_model: SidModel, fp8_queries: bool, fp8_probabilities: bool
) -> None:
    """Also with FP8 queries and probabilities: a hit's new tokens round them as a miss's do."""
    options = {
        "kv_dtype": "fp8",
        "kv_fp8_queries": fp8_queries,
        "kv_fp8_probabilities": fp8_probabilities,
    }
    cached = sid_model.engine(**options)
    plain = sid_model.engine(prefix_cache=False, **options)
    requests = _prefix_requests(cached.sid_layout.begin_token_id, seed=1, count=12)
    _same_answers(_one_by_one(cached, requests), _one_by_one(plain, requests))
    assert cached.scheduler.kv.stats().hit_tokens > 0


def test_saturated_values_keep_answers_finite(sid_model: SidModel) -> None:
    """Scales 1/1000 of the weight bound: most K and V values clamp at ±448 x scale. The
    answers are poor but finite, and constrained beams still catalog SIDs."""
    model = CausalLM.from_pretrained(sid_model.model_dir)
    assert model.kv_scales is not None
    model.kv_scales = KvScales.of(model.kv_scales.k / 1000, model.kv_scales.v / 1000)
    engine = Engine(sid_model.engine_config(kv_dtype="fp8"), model=model)
    outputs = engine.generate([_constrained(i, width) for i, width in enumerate((4, 16))])
    assert _illegal_beams(engine, sid_model, outputs) == 0
    assert all(torch.isfinite(torch.tensor(b.score)) for o in outputs for b in o.beams)
    stored = engine.runner.cache.k.float()
    assert stored.abs().max() == 448.0 and stored.isfinite().all()


def test_the_cache_takes_half_the_bytes_per_slot(sid_model: SidModel) -> None:
    """The same slot count in half the bytes of bfloat16 (a quarter of fp32): what lets
    kv_memory_fraction hold twice the slots (`kv/test_kv_capacity.py`)."""
    caches = {
        kv: sid_model.engine(dtype="bfloat16", kv_dtype=kv, max_kv_slots=512).runner.cache
        for kv in ("auto", "fp8")
    }
    auto, fp8 = caches["auto"], caches["fp8"]
    assert auto.num_slots == fp8.num_slots
    assert 2 * (fp8.k.nbytes + fp8.v.nbytes) == auto.k.nbytes + auto.v.nbytes


def test_bad_kv_dtype_values_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="kv_dtype must be one of auto, fp8, got 'int8'"):
        EngineConfig(model_dir="/m", kv_dtype="int8")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kv_dtype fp8 needs attention_backend auto, triton"):
        EngineConfig(model_dir="/m", kv_dtype="fp8", attention_backend="flashinfer")  # type: ignore[arg-type]
    assert EngineConfig(model_dir="/m").kv_dtype is KVDType.AUTO
    assert EngineConfig(model_dir="/m", kv_dtype="fp8").kv_dtype is KVDType.FP8  # type: ignore[arg-type]

    monkeypatch.setenv("WIDEBEAM_DECODER_MODEL", "/m")
    monkeypatch.setenv("WIDEBEAM_DECODER_KV_DTYPE", "fp8")
    assert DecoderSettings().engine_config().kv_dtype is KVDType.FP8
    args = build_parser().parse_args(["decoder", "serve", "--kv-dtype", "auto"])
    assert settings_from_args(args).engine_config().kv_dtype is KVDType.AUTO
    monkeypatch.setenv("WIDEBEAM_DECODER_KV_DTYPE", "fp16")
    with pytest.raises(ValidationError, match="kv_dtype"):
        DecoderSettings()


def test_widebeam_generate_kv_dtype_flag(
    sid_model: SidModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    requests, answers = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    requests.write_text(
        '{"id": "sid", "input_ids": [5, 6], "beam_width": 8, "n": 8, "max_new_tokens": 5, '
        '"eos_token_id": [], "constrained": true}\n'
    )
    model = ["--model", str(sid_model.model_dir), "--catalog", str(sid_model.catalog_path)]
    files = ["--input", str(requests), "--output", str(answers)]
    args = build_parser().parse_args(["generate", *model, *files, "--kv-dtype", "fp8"])
    assert args.kv_dtype == "fp8" and args.handler(args) == 0
    [row] = [json.loads(line) for line in answers.read_text().splitlines()]
    assert len(row["beams"]) == 8 and all(b["item_ids"] for b in row["beams"])
    with pytest.raises(SystemExit) as bad:
        build_parser().parse_args(["generate", *model, "--kv-dtype", "int4"])
    assert bad.value.code == 2
    assert "--kv-dtype: invalid choice: 'int4'" in capsys.readouterr().err
