"""The decoder's fused layout (residual adds fused into the next norm, q/k norm fused with rope)
against the plain per-op arithmetic it replaces: bit-identical on the CPU (the reference path),
close on CUDA (the Triton kernels)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from widebeam.kernels.layers.torch_ref import apply_rotary_ref, rms_norm_ref, silu_mul_ref
from widebeam.services.decoder.model.attention_context import DenseCausalAttention
from widebeam.services.decoder.model.transformer import CausalLM

TinyFactory = Callable[..., Path]


def _unfused_forward(model: CausalLM, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """HF's order, one torch op at a time: h = h + attn(norm(h)); h = h + mlp(norm(h))."""
    attn, eps = DenseCausalAttention(), model.config.rms_norm_eps
    cos, sin = model.rotary(pos)
    h = model.model.embed_tokens(ids)
    n = h.shape[0]
    for layer in model.model.layers:
        a, mlp = layer.self_attn, layer.mlp
        x = rms_norm_ref(h, layer.input_layernorm.weight, eps)
        q = a.q_proj(x).view(n, a.n_heads, a.head_dim)
        k = a.k_proj(x).view(n, a.n_kv_heads, a.head_dim)
        v = a.v_proj(x).view(n, a.n_kv_heads, a.head_dim)
        if a.q_norm is not None and a.k_norm is not None:
            q, k = rms_norm_ref(q, a.q_norm.weight, eps), rms_norm_ref(k, a.k_norm.weight, eps)
        q, k = apply_rotary_ref(q, cos, sin), apply_rotary_ref(k, cos, sin)
        h = h + a.o_proj(attn.attend(a.layer_idx, q, k, v).reshape(n, -1))
        x = rms_norm_ref(h, layer.post_attention_layernorm.weight, eps)
        h = h + mlp.down_proj(silu_mul_ref(mlp.gate_proj(x), mlp.up_proj(x)))
    return rms_norm_ref(h, model.model.norm.weight, eps)


def _inputs(model: CausalLM, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(n)
    ids = torch.randint(0, model.config.vocab_size, (n,), generator=gen)
    return ids.to(model.device), (torch.arange(n) + 3).to(model.device)


@pytest.mark.parametrize("model_type", ["qwen3", "llama"])
@pytest.mark.parametrize("num_layers", [1, 3])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_layout_is_bit_identical_on_cpu(
    tiny_model_dir: TinyFactory, model_type: str, num_layers: int, dtype: str
) -> None:
    d = tiny_model_dir(model_type=model_type, num_layers=num_layers)
    model = CausalLM.from_pretrained(d, dtype=getattr(torch, dtype))
    ids, pos = _inputs(model, 23)
    with torch.inference_mode():
        got = model(ids, pos, DenseCausalAttention())
        assert torch.equal(got, _unfused_forward(model, ids, pos))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_kernels_track_the_unfused_ops_on_gpu(
    tiny_model_dir: TinyFactory, dtype: str
) -> None:
    """Same device, same matmuls: only the norm/rope kernels differ from the torch ops (their
    rsqrt and summation order; bf16 roundings flip rarely and then propagate)."""
    d = tiny_model_dir(model_type="qwen3", num_layers=3)
    model = CausalLM.from_pretrained(d, dtype=getattr(torch, dtype), device="cuda")
    ids, pos = _inputs(model, 300)
    with torch.inference_mode():
        got = model(ids, pos, DenseCausalAttention()).float()
        ref = _unfused_forward(model, ids, pos).float()
    rel = ((got - ref).abs().max() / ref.abs().max()).item()
    assert rel <= (1e-5 if dtype == "float32" else 3e-2)
