"""EngineConfig: values arrive as enums, bad ones are named, KV sizing options are checked."""

from __future__ import annotations

import pytest

from widebeam.services.decoder.config import BeamExpansion, DType, EngineConfig


def test_strings_become_the_enums() -> None:
    config = EngineConfig(model_dir="/m", dtype="bfloat16", beam_expansion="dense")
    assert config.dtype is DType.BFLOAT16 and config.beam_expansion is BeamExpansion.DENSE
    assert EngineConfig(model_dir="/m").dtype is DType.FLOAT32


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"dtype": "fp8"}, "dtype must be one of float32, bfloat16, float16, got 'fp8'"),
        ({"beam_expansion": "fast"}, "beam_expansion must be one of streamed, dense"),
        ({"max_rows": 0}, "max_rows must be positive"),
        ({"max_kv_slots": 0}, "max_kv_slots must be positive"),
        ({"max_kv_slots": 8}, "max_kv_slots must hold at least one page"),
        ({"max_model_len": 1}, "max_model_len must be >= 2"),
        ({"device": "cuda", "kv_memory_fraction": 0.0}, r"kv_memory_fraction must be in \(0, 1\]"),
        ({"kv_memory_fraction": 0.5}, "device 'cpu' has none to measure: give max_kv_slots"),
        ({"admission_ratio": -0.5}, "admission_ratio must be a finite number >= 0"),
        ({"admission_ratio": float("nan")}, "admission_ratio must be a finite number >= 0"),
        ({"admission_ratio": float("inf")}, "admission_ratio must be a finite number >= 0"),
        ({"admission_max_wait_steps": -1}, "admission_max_wait_steps must be >= 0"),
        ({"kv_fp8_queries": True}, "kv_fp8_queries needs kv_dtype fp8.*got kv_dtype 'auto'"),
        (
            {"kv_fp8_probabilities": True},
            "kv_fp8_probabilities needs kv_dtype fp8.*got kv_dtype 'auto'",
        ),
    ],
)
def test_bad_values_are_named(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EngineConfig(model_dir="/m", **overrides)  # type: ignore[arg-type]


def test_kv_memory_fraction_on_cuda() -> None:
    for device in ("cuda", "cuda:1"):
        assert EngineConfig(model_dir="/m", device=device, kv_memory_fraction=1.0)
