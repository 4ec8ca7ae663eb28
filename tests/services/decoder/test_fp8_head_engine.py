"""The engine with `head_quantization="fp8"` on the CPU: constrained beams stay catalog SIDs,
and the option is taken from the decoder's settings and checked against a model loaded otherwise
(`widebeam generate`'s flag: test_fp8_engine.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.test_fp8_engine import _constrained, _illegal_beams
from widebeam.services.decoder.config import Quantization
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.server.settings import DecoderSettings


@pytest.mark.parametrize("beam_expansion", ["streamed", "dense"])
def test_constrained_beams_with_an_fp8_head_are_catalog_sids(
    sid_model: SidModel, beam_expansion: str
) -> None:
    engine = sid_model.engine(
        quantization="fp8",
        head_quantization="fp8",
        beam_expansion=beam_expansion,
        dense_expansion_limit=0,
    )
    assert engine.model.head_fp8 is not None
    requests = [_constrained(i, width) for i, width in enumerate((1, 4, 16, 32))]
    outputs = engine.generate(requests)
    assert [len(o.beams) for o in outputs] == [1, 4, 16, 32]
    assert _illegal_beams(engine, sid_model, outputs) == 0


def test_a_model_loaded_with_another_head_is_refused(sid_model: SidModel) -> None:
    model = CausalLM.from_pretrained(sid_model.model_dir, quantization="fp8")
    with pytest.raises(ValueError, match=r"head_quantization 'none', the config asks for 'fp8'"):
        Engine(sid_model.engine_config(quantization="fp8", head_quantization="fp8"), model=model)


def test_decoder_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIDEBEAM_DECODER_MODEL", "/m")
    monkeypatch.setenv("WIDEBEAM_DECODER_QUANTIZATION", "fp8")
    monkeypatch.setenv("WIDEBEAM_DECODER_HEAD_QUANTIZATION", "fp8")
    assert DecoderSettings().engine_config().head_quantization is Quantization.FP8
    monkeypatch.setenv("WIDEBEAM_DECODER_QUANTIZATION", "none")
    with pytest.raises(ValidationError, match="head_quantization fp8 needs quantization fp8"):
        DecoderSettings()
