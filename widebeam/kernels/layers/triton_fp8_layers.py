"""The layer kernels that feed an FP8 GEMM, ending in its activation quantization: RMSNorm (and
the residual add + RMSNorm) before the q/k/v and gate/up GEMMs, the SiLU product before down.

Each program computes one row as `triton_layers` does (same rounding points: the model-dtype
value the unfused kernel would store), then that row's scale and FP8 values as
`widebeam/kernels/fp8/triton_quantize` does (a row held whole in registers; a SiLU product
wider than SILU_MAX_CHUNK is computed in chunks twice, once for its amax, once to quantize). The FP8
bytes and scales are those of the layer kernel followed by the quantization pass, without the
model-dtype row written by one and read back by the other (at 6,144 decode rows and the 1.7B
shape: 25 MB each way per norm, 75 MB per SiLU product). The residual stream stays in the
model dtype."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from widebeam.kernels.fp8.quantize import FP8_DTYPE, FP8_MAX, INV_FP8_MAX, MIN_SCALE, Fp8Rows
from widebeam.kernels.fp8.triton_quantize import _row_scale, _store_fp8_row, _to_fp8, chunking
from widebeam.kernels.layers.triton_layers import _norm_launch, _rows, _scaled_norm


@triton.jit
def _rms_norm_fp8_kernel(
    x_ptr, w_ptr, q_ptr, scale_ptr, dim, q_width, stride_x, stride_q, eps, min_scale, fp8_max,
    inv_fp8_max, BLOCK: tl.constexpr, ROUND_IN_FP32: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < dim
    x = tl.load(x_ptr + row * stride_x + cols, mask=inside, other=0.0)
    out = _scaled_norm(x, w_ptr, cols, inside, dim, eps)  # masked lanes: 0
    _store_fp8_row(
        out.to(tl.float32), cols, q_ptr + row * stride_q, scale_ptr + row, q_width, min_scale,
        fp8_max, inv_fp8_max, ROUND_IN_FP32,
    )  # fmt: skip


@triton.jit
def _add_rms_norm_fp8_kernel(
    x_ptr, res_ptr, w_ptr, res_out_ptr, q_ptr, scale_ptr, dim, q_width, stride_x, stride_res,
    stride_res_out, stride_q, eps, min_scale, fp8_max, inv_fp8_max,
    BLOCK: tl.constexpr, ROUND_IN_FP32: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < dim
    x = tl.load(x_ptr + row * stride_x + cols, mask=inside, other=0.0)
    res = tl.load(res_ptr + row * stride_res + cols, mask=inside, other=0.0)
    total = (x.to(tl.float32) + res.to(tl.float32)).to(x.dtype)  # torch's add stores it
    tl.store(res_out_ptr + row * stride_res_out + cols, total, mask=inside)
    out = _scaled_norm(total, w_ptr, cols, inside, dim, eps)
    _store_fp8_row(
        out.to(tl.float32), cols, q_ptr + row * stride_q, scale_ptr + row, q_width, min_scale,
        fp8_max, inv_fp8_max, ROUND_IN_FP32,
    )  # fmt: skip


@triton.jit
def _silu_mul_fp8_kernel(
    gate_ptr, up_ptr, q_ptr, scale_ptr, cols_in, q_width, stride_gate, stride_up, stride_q,
    min_scale, fp8_max, inv_fp8_max,
    CHUNK: tl.constexpr, ONE_CHUNK: tl.constexpr, ROUND_IN_FP32: tl.constexpr,
):  # fmt: skip
    """One program per row: the whole row for its amax (unlike the unfused kernel's blocks),
    held in registers when it fits one chunk, else computed in chunks twice (`triton_quantize`'s
    two passes: the product is recomputed rather than stored)."""
    row = tl.program_id(0).to(tl.int64)
    gate_row = gate_ptr + row * stride_gate
    up_row = up_ptr + row * stride_up
    q_row = q_ptr + row * stride_q
    cols = tl.arange(0, CHUNK)
    if ONE_CHUNK:
        out = _silu_mul_chunk(gate_row, up_row, cols, cols < cols_in)
        _store_fp8_row(
            out, cols, q_row, scale_ptr + row, q_width, min_scale, fp8_max, inv_fp8_max,
            ROUND_IN_FP32,
        )  # fmt: skip
    else:
        amax = tl.zeros([CHUNK], dtype=tl.float32)
        for start in range(0, cols_in, CHUNK):
            out = _silu_mul_chunk(gate_row + start, up_row + start, cols, start + cols < cols_in)
            amax = tl.maximum(amax, tl.abs(out))
        scale = _row_scale(tl.max(amax, axis=0), min_scale, inv_fp8_max)
        tl.store(scale_ptr + row, scale)
        inv_scale = tl.math.div_rn(1.0, scale)
        for start in range(0, q_width, CHUNK):  # past cols_in: zeros, the padding
            out = _silu_mul_chunk(gate_row + start, up_row + start, cols, start + cols < cols_in)
            q = _to_fp8(out, scale, inv_scale, fp8_max, ROUND_IN_FP32)
            tl.store(q_row + start + cols, q, mask=start + cols < q_width)


@triton.jit
def _silu_mul_chunk(gate_ptr, up_ptr, cols, inside):
    """silu(gate) * up at `cols` as the unfused kernel computes it (masked lanes 0), in fp32."""
    g = tl.load(gate_ptr + cols, mask=inside, other=0.0)
    u = tl.load(up_ptr + cols, mask=inside, other=0.0)
    gf = g.to(tl.float32)
    act = (gf / (1.0 + tl.exp(-gf))).to(g.dtype)  # F.silu stores in the model dtype
    out = (act.to(tl.float32) * u.to(tl.float32)).to(g.dtype)  # so does the product
    return out.to(tl.float32)


def _fp8_rows(rows: int, cols: int, device: torch.device) -> Fp8Rows:
    return Fp8Rows(
        torch.empty(rows, cols, dtype=FP8_DTYPE, device=device),  # [rows, cols] e4m3
        torch.empty(rows, 1, dtype=torch.float32, device=device),  # [rows, 1] fp32
    )


# SiLU products (their FP8 width) wider than this are computed in chunks of this many columns,
# twice (`triton_quantize.chunking`); bench/fp8_gemm.py part 2 times both. Unlike the plain
# quantization, one pass wins at the W3 width (6,144 x 6,144 on the H200: 71.6 us, two passes
# over 2,048-column chunks 79.5 us; floor ~44 us): a second pass recomputes the product, two
# more special-function-unit operations (exp, reciprocal) an element.
SILU_MAX_CHUNK = 8192


def _launch(dim: int, cols: int, device: torch.device) -> dict[str, int | bool]:
    """The norms: one program per row, BLOCK covering the row and its FP8 padding (the row in
    registers whole, as `triton_layers`' norms hold it: hidden sizes), with the warps of
    `triton_layers`' norm kernel: the sum of squares is reduced in an order that follows the
    warps, and the fused kernel's normed values must be the unfused kernel's bit for bit (4
    warps instead of 8 at 2,048 columns was 10% faster on the H200 and moved a few FP8 bytes
    in 6,144 rows)."""
    if cols < dim:
        raise ValueError(f"FP8 width {cols} is narrower than the row ({dim})")
    block = triton.next_power_of_2(cols)
    return {
        "BLOCK": block,
        "num_warps": _norm_launch(block)["num_warps"],
        "ROUND_IN_FP32": device.type != "cuda",  # the interpreter's cast: _to_fp8
    }


def rms_norm_fp8_triton(
    x: torch.Tensor,  # [rows, D] model dtype
    weight: torch.Tensor,  # [D] model dtype
    eps: float,
    cols: int,  # the FP8 width (>= D): the GEMM's padded input width
) -> Fp8Rows:  # rms_norm(x) quantized per row, zero-padded to cols
    rows = _rows(x)
    out = _fp8_rows(rows.shape[0], cols, x.device)
    if rows.shape[0]:
        _rms_norm_fp8_kernel[(rows.shape[0],)](
            rows, weight, out.data, out.scale, rows.shape[1], cols, rows.stride(0),
            out.data.stride(0), eps, MIN_SCALE, FP8_MAX, INV_FP8_MAX,
            **_launch(rows.shape[1], cols, x.device),
        )  # fmt: skip
    return out


def add_rms_norm_fp8_triton(
    x: torch.Tensor,  # [rows, D] model dtype, a sublayer's output
    residual: torch.Tensor,  # [rows, D] model dtype
    weight: torch.Tensor,  # [D] model dtype
    eps: float,
    cols: int,  # the FP8 width (>= D)
) -> tuple[Fp8Rows, torch.Tensor]:  # (rms_norm(x + residual) in FP8, x + residual [rows, D])
    if x.shape != residual.shape or x.dtype != residual.dtype:
        raise ValueError(
            f"x {tuple(x.shape)} {x.dtype} and residual {tuple(residual.shape)} "
            f"{residual.dtype} must match"
        )
    rows, res = _rows(x), _rows(residual)
    new_res = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    out = _fp8_rows(rows.shape[0], cols, x.device)
    if rows.shape[0]:
        _add_rms_norm_fp8_kernel[(rows.shape[0],)](
            rows, res, weight, new_res, out.data, out.scale, rows.shape[1], cols,
            rows.stride(0), res.stride(0), new_res.stride(0), out.data.stride(0), eps,
            MIN_SCALE, FP8_MAX, INV_FP8_MAX, **_launch(rows.shape[1], cols, x.device),
        )  # fmt: skip
    return out, new_res.view(x.shape)


def silu_mul_fp8_triton(
    gate: torch.Tensor,  # [rows, I] model dtype; rows may be strided (halves of a gate_up GEMM)
    up: torch.Tensor,  # [rows, I] same shape and dtype
    cols: int,  # the FP8 width (>= I)
    max_chunk: int = SILU_MAX_CHUNK,  # wider rows: two passes over chunks of this many columns
) -> Fp8Rows:  # silu(gate) * up quantized per row, zero-padded to cols (same bytes any chunk)
    if gate.shape != up.shape or gate.dtype != up.dtype:
        raise ValueError(f"gate {tuple(gate.shape)} and up {tuple(up.shape)} must match")
    if cols < gate.shape[-1]:
        raise ValueError(f"FP8 width {cols} is narrower than the row ({gate.shape[-1]})")
    gate_rows, up_rows = _rows(gate), _rows(up)
    out = _fp8_rows(gate_rows.shape[0], cols, gate.device)
    if gate_rows.shape[0]:
        _silu_mul_fp8_kernel[(gate_rows.shape[0],)](
            gate_rows, up_rows, out.data, out.scale, gate_rows.shape[1], cols,
            gate_rows.stride(0), up_rows.stride(0), out.data.stride(0), MIN_SCALE, FP8_MAX,
            INV_FP8_MAX, ROUND_IN_FP32=not gate.is_cuda, **chunking(cols, max_chunk),
        )  # fmt: skip
    return out
