"""Triton versions of the reference layers: one read and one write per tensor instead of a chain
of elementwise kernels (a decode step over thousands of beam rows is bandwidth-bound here).
The rounding points are the reference's: fp32 math, a cast to the model dtype where PyTorch's
separate kernels would store, so results match up to the exp/rsqrt implementations."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _scaled_norm(x, w_ptr, cols, inside, dim, eps):
    """One row in the model dtype (masked lanes 0) -> weight * rms_norm(x), the reference's way:
    normalised in fp32, cast to the model dtype, scaled, cast again."""
    xf = x.to(tl.float32)
    mean_sq = tl.sum(xf * xf, axis=0) / dim
    normed = (xf * tl.math.rsqrt(mean_sq + eps)).to(x.dtype)
    w = tl.load(w_ptr + cols, mask=inside, other=0.0)
    return (w.to(tl.float32) * normed.to(tl.float32)).to(x.dtype)


@triton.jit
def _rms_norm_kernel(
    x_ptr, w_ptr, out_ptr, dim, stride_x, stride_out, eps,
    BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < dim
    x = tl.load(x_ptr + row * stride_x + cols, mask=inside, other=0.0)
    out = _scaled_norm(x, w_ptr, cols, inside, dim, eps)
    tl.store(out_ptr + row * stride_out + cols, out, mask=inside)


@triton.jit
def _add_rms_norm_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, dim, stride_x, stride_res, stride_out, eps,
    BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < dim
    x = tl.load(x_ptr + row * stride_x + cols, mask=inside, other=0.0)
    res = tl.load(res_ptr + row * stride_res + cols, mask=inside, other=0.0)
    total = (x.to(tl.float32) + res.to(tl.float32)).to(x.dtype)  # torch's add stores it
    tl.store(res_out_ptr + row * stride_out + cols, total, mask=inside)
    out = _scaled_norm(total, w_ptr, cols, inside, dim, eps)
    tl.store(out_ptr + row * stride_out + cols, out, mask=inside)


@triton.jit
def _silu_mul_kernel(
    gate_ptr, up_ptr, out_ptr, cols, stride_gate, stride_up, stride_out, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < cols
    g = tl.load(gate_ptr + row * stride_gate + offs, mask=inside, other=0.0)
    u = tl.load(up_ptr + row * stride_up + offs, mask=inside, other=0.0)
    gf = g.to(tl.float32)
    act = (gf / (1.0 + tl.exp(-gf))).to(g.dtype)  # F.silu stores in the model dtype
    out = (act.to(tl.float32) * u.to(tl.float32)).to(g.dtype)
    tl.store(out_ptr + row * stride_out + offs, out, mask=inside)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """[..., D] -> [rows, D] with unit stride along D (a view when the layout allows)."""
    rows = x.reshape(-1, x.shape[-1])
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def _norm_launch(dim: int) -> dict[str, int]:
    block = triton.next_power_of_2(dim)
    return {"BLOCK": block, "num_warps": max(1, min(8, block // 256))}


def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    rows = _rows(x)
    out = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    if rows.shape[0]:
        _rms_norm_kernel[(rows.shape[0],)](
            rows, weight, out, rows.shape[1], rows.stride(0), out.stride(0), eps,
            **_norm_launch(rows.shape[1]),
        )  # fmt: skip
    return out.view(x.shape)


def add_rms_norm_triton(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual) in one pass; see torch_ref.add_rms_norm_ref."""
    if x.shape != residual.shape or x.dtype != residual.dtype:
        raise ValueError(
            f"x {tuple(x.shape)} {x.dtype} and residual {tuple(residual.shape)} "
            f"{residual.dtype} must match"
        )
    rows, res = _rows(x), _rows(residual)
    out = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    new_res = torch.empty_like(out)
    if rows.shape[0]:
        _add_rms_norm_kernel[(rows.shape[0],)](
            rows, res, weight, out, new_res, rows.shape[1], rows.stride(0), res.stride(0),
            out.stride(0), eps, **_norm_launch(rows.shape[1]),
        )  # fmt: skip
    return out.view(x.shape), new_res.view(x.shape)


def silu_mul_triton(
    gate: torch.Tensor,  # [..., I] model dtype; rows may be strided (halves of a gate_up GEMM)
    up: torch.Tensor,  # [..., I] same shape and dtype
) -> torch.Tensor:  # [..., I] contiguous
    if gate.shape != up.shape or gate.dtype != up.dtype:
        raise ValueError(f"gate {tuple(gate.shape)} and up {tuple(up.shape)} must match")
    gate_rows, up_rows = _rows(gate), _rows(up)
    out = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    rows, cols = gate_rows.shape
    block = 1024
    if rows and cols:
        grid = (rows, triton.cdiv(cols, block))
        _silu_mul_kernel[grid](
            gate_rows, up_rows, out, cols, gate_rows.stride(0), up_rows.stride(0), cols,
            BLOCK=block,
        )  # fmt: skip
    return out
