"""`precision_args.add_precision_arguments`: the engine's precision options on a command line."""

from __future__ import annotations

import argparse

import pytest

from widebeam.services.decoder.config import Fp8Accumulation, KVDType, Quantization
from widebeam.services.decoder.precision_args import add_precision_arguments


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_precision_arguments(parser, "--dtype")
    return parser


def test_defaults_are_the_engine_configs() -> None:
    args = _parser().parse_args([])
    assert args.quantization == Quantization.NONE
    assert args.fp8_accumulation == Fp8Accumulation.FAST
    assert args.head_quantization == Quantization.NONE
    assert args.kv_dtype == KVDType.AUTO
    assert args.kv_fp8_queries is False
    assert args.kv_fp8_probabilities is False


def test_fp8_everywhere() -> None:
    args = _parser().parse_args(
        ["--quantization", "fp8", "--kv-dtype", "fp8", "--fp8-accumulation", "precise",
         "--head-quantization", "fp8", "--kv-fp8-queries", "--kv-fp8-probabilities"]
    )  # fmt: skip
    assert args.kv_fp8_queries is True
    assert args.kv_fp8_probabilities is True
    assert Quantization(args.quantization) == Quantization.FP8
    assert KVDType(args.kv_dtype) == KVDType.FP8
    assert Fp8Accumulation(args.fp8_accumulation) == Fp8Accumulation.PRECISE
    assert Quantization(args.head_quantization) == Quantization.FP8


@pytest.mark.parametrize(
    ("option", "value"), [("--quantization", "int4"), ("--kv-dtype", "fp16"),
                          ("--fp8-accumulation", "exact"), ("--head-quantization", "int8")],
)  # fmt: skip
def test_an_unknown_choice_is_refused_by_name(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args([option, value])
    assert f"argument {option}: invalid choice: '{value}'" in capsys.readouterr().err


def test_help_names_the_model_dtype_option() -> None:
    assert "(auto: in --dtype)" in " ".join(_parser().format_help().split())
