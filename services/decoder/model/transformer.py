"""Qwen3 / Qwen2 / Llama decoder on a flat token batch.

Sequences are concatenated along one token axis (no batch dimension, no padding); everything that
couples tokens is inside ``AttentionContext.attend``. Module names mirror HF checkpoints so the
state dict loads without renaming.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from widebeam.kernels.fp8.backend import fp8_gemm_for
from widebeam.kernels.kv.fp8_kv import KvScales
from widebeam.kernels.layers.dispatch import qk_norm_rope
from widebeam.services.decoder.config import Fp8Accumulation, Quantization
from widebeam.services.decoder.model.attention_context import AttentionContext
from widebeam.services.decoder.model.config import ModelConfig
from widebeam.services.decoder.model.fp8_checkpoint import read_fp8_layout, split_fp8_state
from widebeam.services.decoder.model.fp8_linear import (
    Activation,
    Fp8Linear,
    quantized_input_cols,
)
from widebeam.services.decoder.model.kv_scales import kv_scales_for, pop_kv_scales
from widebeam.services.decoder.model.layers import (
    RMSNorm,
    RotaryEmbedding,
    SwiGLU,
    fuse_rows,
    fused_applies,
)
from widebeam.services.decoder.model.quantization import quantize_fp8, quantize_head
from widebeam.services.decoder.model.weights import load_state_dict, validate_state_dict

LM_HEAD = "lm_head.weight"
# The serving LM head's output rows are padded to a multiple of this: with an unaligned vocabulary
# (a SID-extended one, say 153474 tokens) the logits' row stride breaks 16-byte alignment and
# cuBLAS falls back to a far slower (sm80) kernel on Hopper.
HEAD_ROW_ALIGN = 64
# Old Llama checkpoints saved the rope table; it is recomputed, never loaded.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


class SelfAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.n_heads = config.num_attention_heads
        self.n_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.rms_norm_eps = config.rms_norm_eps
        hidden = config.hidden_size
        q_out, kv_out = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.q_proj = nn.Linear(hidden, q_out, bias=config.attention_bias)
        self.k_proj = nn.Linear(hidden, kv_out, bias=config.attention_bias)
        self.v_proj = nn.Linear(hidden, kv_out, bias=config.attention_bias)
        self.o_proj = nn.Linear(q_out, hidden, bias=config.o_proj_bias)
        self.q_norm: RMSNorm | None = None
        self.k_norm: RMSNorm | None = None
        if config.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.qkv_sizes = (q_out, kv_out, kv_out)
        self.register_buffer("qkv_weight", None, persistent=False)  # [q_out + 2 kv_out, hidden]
        self.register_buffer("qkv_bias", None, persistent=False)
        # quantization="fp8": the fused q/k/v GEMM in FP8 (q/k/v_proj are then removed)
        self.qkv_fp8: nn.Module | None = None

    def fuse_projections(self) -> None:
        self.qkv_weight, self.qkv_bias = fuse_rows([self.q_proj, self.k_proj, self.v_proj])

    def _project(self, x: Activation) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.qkv_fp8 is not None:
            q, k, v = self.qkv_fp8(x).split(self.qkv_sizes, dim=1)
            return q, k, v
        assert isinstance(x, torch.Tensor), "FP8 rows fed a model-dtype GEMM"
        if fused_applies(self.qkv_weight, self.q_proj.weight):
            qkv = F.linear(x, self.qkv_weight, self.qkv_bias)  # [N, q_out + 2 kv_out]
            q, k, v = qkv.split(self.qkv_sizes, dim=1)  # views: the kernels take row strides
            return q, k, v
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)

    def forward(
        self,
        x: Activation,  # [N, hidden], or its FP8 rows when qkv_fp8 takes them
        cos: torch.Tensor,  # [N, head_dim] fp32
        sin: torch.Tensor,  # [N, head_dim] fp32
        attn: AttentionContext,
    ) -> torch.Tensor:  # [N, hidden]
        n = cos.shape[0]
        q, k, v = self._project(x)
        q = q.view(n, self.n_heads, self.head_dim)
        k = k.view(n, self.n_kv_heads, self.head_dim)
        v = v.view(n, self.n_kv_heads, self.head_dim)
        # Per-head q/k norm before rope (Qwen3), then rope: one kernel on CUDA.
        q_w = None if self.q_norm is None else self.q_norm.weight
        k_w = None if self.k_norm is None else self.k_norm.weight
        q, k = qk_norm_rope(q, k, cos, sin, q_w, k_w, self.rms_norm_eps)
        out = attn.attend(self.layer_idx, q, k, v)  # [N, n_heads, head_dim]
        return self.o_proj(out.reshape(n, self.n_heads * self.head_dim))


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = SelfAttention(config, layer_idx)
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self,
        h: torch.Tensor,  # [N, hidden] the previous layer's MLP output (the embeddings first)
        residual: torch.Tensor | None,  # [N, hidden] the residual stream before h; None first
        cos: torch.Tensor,  # [N, head_dim] fp32
        sin: torch.Tensor,  # [N, head_dim] fp32
        attn: AttentionContext,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # (MLP output, residual stream before it)
        """HF's ``h = h + attn(norm(h)); h = h + mlp(norm(h))`` with each residual add fused
        into the norm that follows it: the MLP's add is left to the next layer's input norm (or
        the final norm), so the stream is carried as (h, residual) and the sum is h + residual.
        With FP8 GEMMs each norm also quantizes its output for the GEMM it feeds.
        """
        qkv_cols = quantized_input_cols(self.self_attn.qkv_fp8)
        if residual is None:
            residual, normed = h, self.input_layernorm(h, qkv_cols)
        else:
            normed, residual = self.input_layernorm.add_forward(h, residual, qkv_cols)
        out = self.self_attn(normed, cos, sin, attn)
        gate_up_cols = quantized_input_cols(self.mlp.gate_up_fp8)
        normed, residual = self.post_attention_layernorm.add_forward(out, residual, gate_up_cols)
        return self.mlp(normed), residual


class DecoderModel(nn.Module):
    """The ``model.`` prefix of HF checkpoints."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        # Weights always come from a checkpoint (`from_pretrained` builds on meta), so the
        # table is left uninitialized: Embedding's own normal_ init on meta imports torch's
        # compiler stack, about a second of every decoder and CLI start.
        table = torch.empty(config.vocab_size, config.hidden_size)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, _weight=table)
        self.layers = nn.ModuleList(
            DecoderLayer(config, i) for i in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class CausalLM(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = DecoderModel(config)
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta, config.rope_scaling)
        self.lm_head: nn.Linear | None = None
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.register_buffer("padded_head", None, persistent=False)  # [rows, hidden], align_head
        self.quantization = Quantization.NONE  # how from_pretrained served the linear layers
        self.head_quantization = Quantization.NONE  # and the LM head's GEMM
        # head_quantization="fp8": the aligned head (padding rows included) in FP8
        self.head_fp8: Fp8Linear | None = None
        # how its FP8 GEMMs sum on CUDA (from_pretrained's; meaningful with quantization fp8)
        self.fp8_accumulation = Fp8Accumulation.FAST
        # the FP8 KV cache's scales, [layers, kv_heads] tables (kv_scales.py); from_pretrained sets
        self.kv_scales: KvScales | None = None

    @property
    def lm_head_weight(self) -> torch.Tensor:  # [vocab, hidden]
        if self.lm_head is None:
            return self.model.embed_tokens.weight
        return self.lm_head.weight

    def align_head(self) -> None:
        """Give the LM head a copy padded with zero rows to a multiple of HEAD_ROW_ALIGN, and
        make the head's parameter a view of it (no second copy of the weights)."""
        weight = self.lm_head_weight  # [vocab, hidden]
        vocab, hidden = weight.shape
        rows = -(-vocab // HEAD_ROW_ALIGN) * HEAD_ROW_ALIGN
        if rows == vocab:
            return
        padded = weight.new_zeros(rows, hidden)  # [rows, hidden] model dtype
        padded[:vocab] = weight
        param = nn.Parameter(padded[:vocab], requires_grad=weight.requires_grad)
        if self.lm_head is None:
            self.model.embed_tokens.weight = param
        else:
            self.lm_head.weight = param
        self.padded_head = padded

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, hidden] -> logits [N, vocab] in the model dtype, the serving path: one
        GEMM against the aligned head (`align_head`), the padding columns sliced off (a view
        whose row stride is the padded width)."""
        if self.head_fp8 is not None:
            return self.head_fp8(hidden)[:, : self.config.vocab_size]
        if self.padded_head is None:
            return F.linear(hidden, self.lm_head_weight)
        return F.linear(hidden, self.padded_head)[:, : self.config.vocab_size]

    def column_logits(
        self,
        hidden: torch.Tensor,  # [N, hidden]
        columns: torch.Tensor,  # [C] int64 vocabulary ids
    ) -> torch.Tensor:  # [N, C] model dtype
        """The logits of `columns` only: the head's rows gathered, then one small GEMM."""
        if self.head_fp8 is not None:
            return self.head_fp8.output_columns(hidden, columns)
        return F.linear(hidden, self.lm_head_weight.index_select(0, columns))

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    def forward(
        self,
        input_ids: torch.Tensor,  # [N] int64
        positions: torch.Tensor,  # [N] int64, position of each token within its sequence
        attn: AttentionContext,
    ) -> torch.Tensor:  # [N, hidden], final norm applied
        if input_ids.dim() != 1 or positions.shape != input_ids.shape:
            raise ValueError(
                f"expected flat input_ids/positions of equal shape [N], got "
                f"{tuple(input_ids.shape)} and {tuple(positions.shape)}"
            )
        cos, sin = self.rotary(positions)
        h = self.model.embed_tokens(input_ids)
        residual: torch.Tensor | None = None
        for layer in self.model.layers:
            h, residual = layer(h, residual, cos, sin, attn)
        if residual is None:
            return self.model.norm(h)
        return self.model.norm.add_forward(h, residual)[0]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, hidden] -> logits [N, vocab] fp32 (matmul in model dtype, like HF)."""
        return F.linear(hidden, self.lm_head_weight).float()

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        quantization: Quantization = Quantization.NONE,
        fp8_accumulation: Fp8Accumulation = Fp8Accumulation.FAST,
        head_quantization: Quantization = Quantization.NONE,
    ) -> CausalLM:
        """`quantization="fp8"`: the decoder layers' linears in FP8 (`model/quantization.py`).
        A checkpoint already in FP8 (`model/fp8_checkpoint.py`) keeps its FP8 weights with
        "fp8" and is dequantized to `dtype` with "none". `fp8_accumulation`: how those GEMMs
        sum on CUDA (`EngineConfig.fp8_accumulation`; the CPU reference sums in fp32).
        `head_quantization="fp8"` (with quantization "fp8"): the serving path's LM head GEMM in
        FP8 too (`head_logits`, `column_logits`; `compute_logits`, the reference, stays)."""
        quantization = Quantization(quantization)
        fp8_accumulation = _fp8_accumulation(fp8_accumulation)
        head_quantization = Quantization(head_quantization)
        if head_quantization == Quantization.FP8 and quantization != Quantization.FP8:
            raise ValueError("head_quantization fp8 needs quantization fp8")
        config = ModelConfig.from_pretrained(path)
        layout = read_fp8_layout(path)
        gemm = None
        if quantization == Quantization.FP8:
            fast = fp8_accumulation == Fp8Accumulation.FAST
            gemm = fp8_gemm_for(torch.device(device), dtype, fast_accum=fast)
        # Build on meta so we never allocate (and randomly init) weights that are overwritten.
        with torch.device("meta"):
            model = cls(config)
        # FP8 scales must not be rounded to `dtype`: a quantized checkpoint is cast below.
        state = load_state_dict(path, dtype=None if layout else dtype, device=device)
        state, checkpoint_kv_scales = pop_kv_scales(state, config)
        prequantized = {}
        if layout is not None:
            state, prequantized = split_fp8_state(state, layout, dtype, gemm is not None)
        state = {k: v for k, v in state.items() if not k.endswith(_IGNORED_SUFFIXES)}
        if config.tie_word_embeddings:
            # Some tied checkpoints still store a copy of the head; the embedding wins, as in HF.
            state.pop(LM_HEAD, None)
        expected = {name: t.shape for name, t in model.state_dict().items()}
        validate_state_dict(state, expected)
        model.load_state_dict(state, strict=True, assign=True)
        del state  # the parameters hold the tensors now: fusing below frees each replaced one
        # Inference only: no autograd bookkeeping even if a caller forgets inference_mode.
        model.requires_grad_(False)
        model.align_head()
        for layer in model.model.layers:
            layer.self_attn.fuse_projections()
            layer.mlp.fuse_projections()
        # From the model-dtype weights, which FP8 linears would replace.
        model.kv_scales = kv_scales_for(model, checkpoint_kv_scales)
        if gemm is not None:
            quantize_fp8(model, gemm, prequantized)
            model.quantization = quantization
            if head_quantization == Quantization.FP8:
                head = model.lm_head_weight if model.padded_head is None else model.padded_head
                model.head_fp8 = quantize_head(head, gemm)
                model.head_quantization = head_quantization
        model.fp8_accumulation = fp8_accumulation
        return model.eval()


def _fp8_accumulation(value: Fp8Accumulation | str) -> Fp8Accumulation:
    try:
        return Fp8Accumulation(value)
    except ValueError:
        choices = ", ".join(a.value for a in Fp8Accumulation)
        raise ValueError(f"fp8_accumulation must be one of {choices}, got {value!r}") from None
