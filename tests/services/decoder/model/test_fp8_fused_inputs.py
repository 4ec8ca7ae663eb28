"""FP8 linears fed rows their previous kernel quantized (the norms before q/k/v and gate/up,
the SiLU product before down) against FP8 linears that quantize model-dtype activations
themselves: the same hidden states and logits, bit for bit (on the CPU through the torch
reference, on CUDA through the fused Triton kernels), and only o_proj still quantizes its own
input. On CUDA a captured forward replays what the eager one computes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from widebeam.kernels.fp8.quantize import Fp8Rows
from widebeam.services.decoder.model.attention_context import DenseCausalAttention
from widebeam.services.decoder.model.fp8_linear import Fp8Linear, set_fused_inputs
from widebeam.services.decoder.model.transformer import CausalLM

TinyFactory = Callable[..., Path]


def _inputs(model: CausalLM, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(n)
    ids = torch.randint(0, model.config.vocab_size, (n,), generator=gen)
    return ids.to(model.device), (torch.arange(n) + 5).to(model.device)


def _logits(model: CausalLM, ids: torch.Tensor, pos: torch.Tensor, fused: bool) -> torch.Tensor:
    set_fused_inputs(model, fused)
    with torch.inference_mode():
        return model.compute_logits(model(ids, pos, DenseCausalAttention()))


def _fp8_linears(model: CausalLM) -> Iterator[tuple[str, Fp8Linear]]:
    for name, module in model.named_modules():
        if isinstance(module, Fp8Linear):
            yield name, module


@pytest.mark.parametrize("model_type", ["qwen3", "qwen2", "llama"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_fused_inputs_give_the_same_logits_on_cpu(
    tiny_model_dir: TinyFactory, model_type: str, dtype: torch.dtype
) -> None:
    d = tiny_model_dir(model_type=model_type, num_layers=3, hidden_size=40, intermediate_size=72)
    model = CausalLM.from_pretrained(d, dtype=dtype, quantization="fp8")
    ids, pos = _inputs(model, 21)
    fused, unfused = _logits(model, ids, pos, True), _logits(model, ids, pos, False)
    assert torch.equal(fused, unfused)
    assert torch.isfinite(fused).all()


def test_only_o_proj_quantizes_its_own_input(tiny_model_dir: TinyFactory) -> None:
    """Which linears get FP8 rows and which quantize: counted at each linear's input and at
    its GEMM path's quantizer."""
    model = CausalLM.from_pretrained(tiny_model_dir(num_layers=2), quantization="fp8")
    rows_in: dict[str, int] = {}
    quantized: dict[str, int] = {}
    for name, linear in _fp8_linears(model):

        def count(x: torch.Tensor, cols: int, name: str = name, inner=linear.gemm.quantize):
            quantized[name] = quantized.get(name, 0) + 1
            return inner(x, cols)

        linear.gemm = dataclasses.replace(linear.gemm, quantize=count)
        linear.register_forward_pre_hook(
            lambda mod, args, name=name: rows_in.__setitem__(
                name, rows_in.get(name, 0) + isinstance(args[0], Fp8Rows)
            )
        )
    ids, pos = _inputs(model, 9)
    _logits(model, ids, pos, True)
    layers = [f"model.layers.{i}" for i in range(2)]
    assert set(quantized) == {f"{p}.self_attn.o_proj" for p in layers}
    assert set(k for k, v in rows_in.items() if v) == {
        f"{p}.{m}"
        for p in layers
        for m in ("self_attn.qkv_fp8", "mlp.gate_up_fp8", "mlp.down_proj")
    }
    quantized.clear()
    _logits(model, ids, pos, False)
    assert len(quantized) == 8  # every FP8 linear quantizes its own input


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_inputs_on_cuda_match_and_capture(tiny_model_dir: TinyFactory) -> None:
    """The fused Triton kernels give the bytes the norm/SiLU kernel then the quantization pass
    give, so the logits are identical; a CUDA graph of the fused forward replays them."""
    d = tiny_model_dir(num_layers=3, hidden_size=256, intermediate_size=704, head_dim=64)
    model = CausalLM.from_pretrained(d, dtype=torch.bfloat16, device="cuda", quantization="fp8")
    ids, pos = _inputs(model, 300)
    fused = _logits(model, ids, pos, True)
    assert torch.equal(fused, _logits(model, ids, pos, False))

    set_fused_inputs(model, True)
    static_ids, static_pos = ids.clone(), pos.clone()
    attn = DenseCausalAttention()
    with torch.inference_mode():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            model(static_ids, static_pos, attn)  # warm-up: kernels compiled, tables cached
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_logits = model.compute_logits(model(static_ids, static_pos, attn))
        static_ids.copy_(ids.roll(7))  # new inputs in the captured buffer
        graph.replay()
        torch.cuda.synchronize()
        eager = model.compute_logits(model(static_ids, static_pos, attn))
    assert torch.equal(static_logits, eager)
