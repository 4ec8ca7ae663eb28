"""Qwen3's per-head q/k RMSNorm and the rotary embedding in one Triton kernel: one program per
token reads its q and k heads once (any head stride, e.g. views of a fused qkv projection) and
the token's cos/sin row, and writes contiguous rotated q and k.

The rounding points are the reference's (torch_ref.qk_norm_rope_ref): the norm as in
rms_norm_ref, the tables cast to the model dtype, ``x * cos`` and ``rotate_half(x) * sin`` each
stored in the model dtype, then their sum. The kernel is compiled without FMA contraction so
that the products are rounded before the sum, as PyTorch's separate kernels round them."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _norm_rope_heads(
    x_ptr, out_ptr, w_ptr, row, heads, stride_n, stride_h, stride_out_n, stride_out_h,
    cos1, cos2, sin1, sin2, eps,
    HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_H: tl.constexpr,
    HAS_NORM: tl.constexpr,
):  # fmt: skip
    """All heads of one token: [BLOCK_H, BLOCK_HALF] tiles of the two halves of each head."""
    h = tl.arange(0, BLOCK_H)[:, None]
    c = tl.arange(0, BLOCK_HALF)[None, :]
    inside = (h < heads) & (c < HALF)
    src = x_ptr + row * stride_n + h * stride_h + c
    x1 = tl.load(src, mask=inside, other=0.0)
    x2 = tl.load(src + HALF, mask=inside, other=0.0)
    dt = x1.dtype
    if HAS_NORM:
        f1, f2 = x1.to(tl.float32), x2.to(tl.float32)
        mean_sq = tl.sum(f1 * f1 + f2 * f2, axis=1) / (2 * HALF)
        scale = tl.math.rsqrt(mean_sq + eps)[:, None]
        w1 = tl.load(w_ptr + c, mask=c < HALF, other=0.0).to(tl.float32)
        w2 = tl.load(w_ptr + HALF + c, mask=c < HALF, other=0.0).to(tl.float32)
        x1 = (w1 * (f1 * scale).to(dt).to(tl.float32)).to(dt)
        x2 = (w2 * (f2 * scale).to(dt).to(tl.float32)).to(dt)
    c1, c2 = cos1.to(dt).to(tl.float32), cos2.to(dt).to(tl.float32)
    s1, s2 = sin1.to(dt).to(tl.float32), sin2.to(dt).to(tl.float32)
    f1, f2 = x1.to(tl.float32), x2.to(tl.float32)
    # rotate_half(x) = (-x2, x1); each product is stored in the model dtype, then the sum.
    out1 = ((f1 * c1).to(dt).to(tl.float32) + (-f2 * s1).to(dt).to(tl.float32)).to(dt)
    out2 = ((f2 * c2).to(dt).to(tl.float32) + (f1 * s2).to(dt).to(tl.float32)).to(dt)
    dst = out_ptr + row * stride_out_n + h * stride_out_h + c
    tl.store(dst, out1, mask=inside)
    tl.store(dst + HALF, out2, mask=inside)


@triton.jit
def _qk_norm_rope_kernel(
    q_ptr, k_ptr, q_out_ptr, k_out_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, q_heads, k_heads,
    stride_qn, stride_qh, stride_kn, stride_kh, stride_qon, stride_qoh, stride_kon, stride_koh,
    stride_cos, stride_sin, eps,
    HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr, HAS_NORM: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK_HALF)[None, :]
    inside = c < HALF
    cos1 = tl.load(cos_ptr + row * stride_cos + c, mask=inside, other=0.0).to(tl.float32)
    cos2 = tl.load(cos_ptr + row * stride_cos + HALF + c, mask=inside, other=0.0).to(tl.float32)
    sin1 = tl.load(sin_ptr + row * stride_sin + c, mask=inside, other=0.0).to(tl.float32)
    sin2 = tl.load(sin_ptr + row * stride_sin + HALF + c, mask=inside, other=0.0).to(tl.float32)
    _norm_rope_heads(
        q_ptr, q_out_ptr, qw_ptr, row, q_heads, stride_qn, stride_qh, stride_qon, stride_qoh,
        cos1, cos2, sin1, sin2, eps, HALF, BLOCK_HALF, BLOCK_HQ, HAS_NORM,
    )  # fmt: skip
    _norm_rope_heads(
        k_ptr, k_out_ptr, kw_ptr, row, k_heads, stride_kn, stride_kh, stride_kon, stride_koh,
        cos1, cos2, sin1, sin2, eps, HALF, BLOCK_HALF, BLOCK_HK, HAS_NORM,
    )  # fmt: skip


def _check(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    q_weight: torch.Tensor | None,
    k_weight: torch.Tensor | None,
) -> None:
    if q.dim() != 3 or k.dim() != 3 or q.dtype != k.dtype:
        raise ValueError(f"q {q.dtype} and k {k.dtype} must be [N, heads, head_dim] of one dtype")
    n, _, dim = q.shape
    table = (n, dim)
    if k.shape[0] != n or k.shape[2] != dim or dim % 2:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)}: rows and even D must match")
    if tuple(cos.shape) != table or tuple(sin.shape) != table:
        raise ValueError(f"cos {tuple(cos.shape)} and sin {tuple(sin.shape)} must be {table}")
    if (q_weight is None) != (k_weight is None):
        raise ValueError("q and k norm weights must be given together")
    for w in (q_weight, k_weight):
        if w is not None and tuple(w.shape) != (dim,):
            raise ValueError(f"norm weight {tuple(w.shape)} must be ({dim},)")


def _unit_last(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def qk_norm_rope_triton(
    q: torch.Tensor,  # [N, Hq, D] model dtype; any row/head strides
    k: torch.Tensor,  # [N, Hkv, D] model dtype
    cos: torch.Tensor,  # [N, D] fp32
    sin: torch.Tensor,  # [N, D] fp32
    q_weight: torch.Tensor | None,  # [D] model dtype, or None (no qk norm)
    k_weight: torch.Tensor | None,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:  # contiguous [N, Hq, D], [N, Hkv, D]
    _check(q, k, cos, sin, q_weight, k_weight)
    q, k, cos, sin = (_unit_last(t) for t in (q, k, cos, sin))
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    n, q_heads, dim = q.shape
    k_heads = k.shape[1]
    if n == 0 or q_heads + k_heads == 0:
        return q_out, k_out
    has_norm = q_weight is not None
    half = dim // 2
    block_half = triton.next_power_of_2(half)
    block_hq, block_hk = triton.next_power_of_2(q_heads), triton.next_power_of_2(k_heads)
    _qk_norm_rope_kernel[(n,)](
        q, k, q_out, k_out, q_weight if has_norm else q, k_weight if has_norm else k, cos, sin,
        q_heads, k_heads, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        q_out.stride(0), q_out.stride(1), k_out.stride(0), k_out.stride(1),
        cos.stride(0), sin.stride(0), eps,
        HALF=half, BLOCK_HALF=block_half, BLOCK_HQ=block_hq, BLOCK_HK=block_hk,
        HAS_NORM=has_norm, num_warps=max(1, min(8, block_hq * block_half // 256)),
        enable_fp_fusion=False,  # round x*cos and rot(x)*sin before the sum, as torch does
    )  # fmt: skip
    return q_out, k_out
