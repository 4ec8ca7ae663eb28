"""Our forward against transformers' modeling code on the same tiny checkpoints."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from widebeam.services.decoder.model.attention_context import (
    AttentionContext,
    DenseCausalAttention,
    dense_causal_attention,
)
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.testing.tiny_tokenizer import sid_token

transformers = pytest.importorskip("transformers")

TinyFactory = Callable[..., Path]
SEQ_LENS = (1, 7, 33)


def _hf_model(path: Path, dtype: torch.dtype = torch.float32) -> Any:
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, attn_implementation="eager"
    )
    return model.eval()


@torch.no_grad()
def _hf_logits(hf: Any, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    return hf(input_ids=ids[None], position_ids=positions[None]).logits[0].float()


@torch.no_grad()
def _our_logits(
    model: CausalLM,
    ids: torch.Tensor,
    positions: torch.Tensor,
    attn: AttentionContext | None = None,
) -> torch.Tensor:
    hidden = model(ids, positions, attn or DenseCausalAttention())
    return model.compute_logits(hidden)


def _rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return ((ours - ref).abs().max() / ref.abs().max()).item()


def _sequences(vocab: int, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=gen) for n in SEQ_LENS]


@pytest.mark.parametrize("model_type", ["qwen3", "qwen2", "llama"])
@pytest.mark.parametrize(("tied", "shards"), [(True, 1), (False, 3)])
def test_fp32_logits_match_transformers(
    tiny_model_dir: TinyFactory, model_type: str, tied: bool, shards: int
) -> None:
    d = tiny_model_dir(model_type=model_type, tie_word_embeddings=tied, shards=shards)
    hf, ours = _hf_model(d), CausalLM.from_pretrained(d)
    assert (
        type(hf).__name__
        == {"qwen3": "Qwen3", "qwen2": "Qwen2", "llama": "Llama"}[model_type] + "ForCausalLM"
    )
    assert (ours.lm_head is None) == tied
    for ids in _sequences(ours.config.vocab_size):
        pos = torch.arange(ids.numel())
        ref, got = _hf_logits(hf, ids, pos), _our_logits(ours, ids, pos)
        assert got.dtype == torch.float32 and got.shape == ref.shape
        assert _rel_err(got, ref) <= 1e-5
    # Parity is only meaningful if the random model actually discriminates between tokens.
    assert 1.5 < ref.std(dim=-1).mean().item() < 5.0


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "linear", "factor": 4.0},
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    ],
    ids=["linear", "llama3"],
)
def test_scaled_rope_matches_transformers(
    tmp_path: Path, tiny_model_dir: TinyFactory, rope: dict[str, float | str]
) -> None:
    d = shutil.copytree(tiny_model_dir(model_type="llama"), tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    cfg["rope_parameters"] = {**rope, "rope_theta": cfg["rope_theta"]}
    (d / "config.json").write_text(json.dumps(cfg))
    hf, ours = _hf_model(d), CausalLM.from_pretrained(d)
    assert ours.config.rope_type == rope["rope_type"]
    ids = _sequences(ours.config.vocab_size, seed=1)[-1]
    # Offset positions so long-wavelength (scaled) frequencies actually rotate.
    pos = torch.arange(ids.numel()) + 900
    assert _rel_err(_our_logits(ours, ids, pos), _hf_logits(hf, ids, pos)) <= 1e-5


def test_padded_vocab_matches_transformers(tiny_model_dir: TinyFactory) -> None:
    d = tiny_model_dir(vocab_size=80, tie_word_embeddings=False)
    hf, ours = _hf_model(d), CausalLM.from_pretrained(d)
    ids = torch.tensor([3, 70, 79, 5])
    pos = torch.arange(4)
    got = _our_logits(ours, ids, pos)
    assert got.shape == (4, 80)
    assert _rel_err(got, _hf_logits(hf, ids, pos)) <= 1e-5


def test_bf16_load_matches_transformers_loosely(tiny_model_dir: TinyFactory) -> None:
    d = tiny_model_dir(dtype="bfloat16")
    hf, ours = _hf_model(d, torch.bfloat16), CausalLM.from_pretrained(d, dtype=torch.bfloat16)
    assert ours.dtype == torch.bfloat16
    ids = _sequences(ours.config.vocab_size, seed=2)[-1]
    pos = torch.arange(ids.numel())
    got = _our_logits(ours, ids, pos)
    assert got.dtype == torch.float32
    assert _rel_err(got, _hf_logits(hf, ids, pos)) <= 3e-2
    # And the bf16 model stays close to the same weights run in fp32.
    fp32 = CausalLM.from_pretrained(d, dtype=torch.float32)
    assert _rel_err(got, _our_logits(fp32, ids, pos)) <= 5e-2


class _SegmentedAttention:
    """Block-diagonal attention over concatenated sequences, built on the dense oracle: shows
    that the flat-batch forward only couples tokens through the context."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths

    def attend(
        self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        qs, ks, vs = (t.split(self.lengths) for t in (q, k, v))
        return torch.cat(
            [dense_causal_attention(a, b, c) for a, b, c in zip(qs, ks, vs, strict=True)]
        )


def test_ragged_flat_batch_matches_per_sequence(tiny_model_dir: TinyFactory) -> None:
    d = tiny_model_dir()
    hf, ours = _hf_model(d), CausalLM.from_pretrained(d)
    seqs = _sequences(ours.config.vocab_size, seed=3)
    ids = torch.cat(seqs)
    pos = torch.cat([torch.arange(s.numel()) for s in seqs])
    attn = _SegmentedAttention([s.numel() for s in seqs])
    assert isinstance(attn, AttentionContext)
    got = _our_logits(ours, ids, pos, attn).split([s.numel() for s in seqs])
    for seq, logits in zip(seqs, got, strict=True):
        ref = _hf_logits(hf, seq, torch.arange(seq.numel()))
        assert _rel_err(logits, ref) <= 1e-5


def test_dense_attention_matches_sdpa_and_prefix_form() -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(9, 4, 16, generator=gen)
    k, v = torch.randn(2, 9, 2, 16, generator=gen)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, enable_gqa=True
    ).transpose(0, 1)
    out = DenseCausalAttention().attend(0, q, k, v)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    # The last 3 queries against all 9 keys equal the tail of the full result.
    torch.testing.assert_close(dense_causal_attention(q[6:], k, v), out[6:])
    half = DenseCausalAttention().attend(0, q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert half.dtype == torch.bfloat16


def test_tokenizer_loads_with_consecutive_sid_ids(tiny_model_dir: TinyFactory) -> None:
    d = tiny_model_dir(sid_levels=(5, 3, 4))
    tok = transformers.AutoTokenizer.from_pretrained(d)
    cfg = json.loads((d / "config.json").read_text())
    assert len(tok) == cfg["vocab_size"] == 64 + 3 + 12 + 2
    level_a = tok.convert_tokens_to_ids([sid_token(0, c) for c in range(5)])
    level_b = tok.convert_tokens_to_ids([sid_token(1, c) for c in range(3)])
    assert level_a == list(range(67, 72)) and level_b == list(range(72, 75))
    text = "<|im_start|><t_3> <t_5><|sid_begin|><s_a_1><s_b_2><s_c_3><|sid_end|><|im_end|>"
    ids = tok(text).input_ids
    assert ids == [65, 3, 5, 79, 68, 74, 78, 80, 66]
    assert tok.decode(ids) == text.replace(" ", "")
    assert tok.eos_token_id == 66 and tok.pad_token_id == 64
