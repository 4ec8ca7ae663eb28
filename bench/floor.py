"""The compute floor of a workload: FLOPs over the measured bf16 matmul rate, and the practical
floor — the same linear layers replayed as a CUDA graph at the row counts the workload runs."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from widebeam.services.decoder.model.config import ModelConfig


def linear_params(cfg: ModelConfig) -> int:
    """Weights multiplied per token, excluding the LM head (embedding lookup is not a matmul)."""
    h, d = cfg.hidden_size, cfg.head_dim
    attn = h * d * (cfg.num_attention_heads * 2 + cfg.num_key_value_heads * 2)
    mlp = 3 * h * cfg.intermediate_size
    return cfg.num_hidden_layers * (attn + mlp)


def request_flops(
    cfg: ModelConfig, prompt: int, beams: int, new_tokens: int, head_columns: int | None = None
) -> float:
    """Prefill of the prompt + (new_tokens - 1) decode steps over `beams` rows, each step's LM
    head over all rows, and attention (prompt causal; each decode row over prompt + suffix).
    `head_columns`: the LM head computes that many columns (`normalization="sid"`), not the
    vocabulary."""
    head = 2 * cfg.hidden_size * (head_columns or cfg.vocab_size)
    lin = 2 * linear_params(cfg)
    attn_unit = 2 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim  # per q·k pair
    flops = lin * prompt + head + attn_unit * prompt * prompt  # causal: P^2/2 pairs, x2 (QK, PV)
    for step in range(1, new_tokens):
        flops += beams * (lin + head + 2 * attn_unit * (prompt + step))
    return float(flops)


Gemm = Callable[[torch.Tensor], torch.Tensor]


def _layer_gemms(layer: torch.nn.Module) -> tuple[Gemm, Gemm, Gemm, Gemm]:
    """A decoder layer's four GEMMs as the engine runs them: the fused q/k/v, o, the fused
    gate/up and down, in the model dtype or in FP8 (`quantization="fp8"`: its modules)."""
    attn, mlp = layer.self_attn, layer.mlp
    if attn.qkv_fp8 is not None:
        return attn.qkv_fp8, attn.o_proj, mlp.gate_up_fp8, mlp.down_proj
    return (
        partial(F.linear, weight=attn.qkv_weight),
        partial(F.linear, weight=attn.o_proj.weight),
        partial(F.linear, weight=mlp.gate_up_weight),
        partial(F.linear, weight=mlp.down_proj.weight),
    )


def linear_step_ms(
    model: torch.nn.Module, rows: int, columns: torch.Tensor | None = None, reps: int = 10
) -> float:
    """One decode step's linear layers as the engine runs them (per layer the fused q,k,v, o,
    the fused gate/up, down, in FP8 for a quantized model; then the aligned LM head) at `rows`
    rows, captured once as a CUDA graph and replayed: cuBLAS at this shape. `columns` [C] int64:
    the head computes those vocabulary columns only (`normalization="sid"`)."""
    x = torch.randn(rows, model.config.hidden_size, device="cuda", dtype=model.dtype)
    layers = [(layer.self_attn.qkv_sizes[0], *_layer_gemms(layer)) for layer in model.model.layers]

    def step() -> torch.Tensor:
        h = x
        for q_out, qkv, o, gate_up, down in layers:
            attn_out = qkv(h)[:, :q_out]
            h = h + o(attn_out)
            gate, up = gate_up(h).chunk(2, dim=1)
            h = h + down(gate * up)
        return model.head_logits(h) if columns is None else model.column_logits(h, columns)

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    del graph
    return start.elapsed_time(end) / reps
