"""Per-token FP8 quantization of activations in Triton: each row's amax, scale and FP8 values
in one kernel (torch's reference takes a chain of elementwise kernels, each a full read and
write of an fp32 copy: at thousands of decode rows, per GEMM, that traffic is of the GEMM's own
order). The arithmetic is `quantize.quantize_rows`': fp32, `scale = max(amax, 1e-12) *
fp32(1 / 448)`, `x / scale` (IEEE) clamped to ±448, rounded to e4m3; zero padding up to `cols`.
Every step is an IEEE-rounded fp32 operation, so the scales and FP8 values equal the torch
reference's bit for bit, compiled or interpreted.

A row up to `max_chunk` wide (padding included) is held in registers whole and read once. A
wider one (MLP inputs: 6,144 at the W3 shape) is read in `max_chunk`-wide chunks twice: once
for its amax, once to quantize and store (the second read mostly from L2), so a program needs
few registers and many run per SM; the amax, a max, is the same in any order. On the H200
(6,144 x 6,144 bf16, floor ~26 us): two passes over 2,048-column chunks 39 us, one pass over
the whole row 50-55 us, the former one-pass kernel 81.8 us.

The per-element arithmetic (`_to_fp8`) is cheap: the H200 run had the one-row-per-program
kernel at 81.8 us for 6,144 x 6,144 bf16 where the bytes take ~26 us, and an IEEE division
(`div_rn`: a reciprocal on the slow special-function unit, ~10 instructions) and the e4m3
rounding emulation (~11 more) per element were a large part of its instructions. So the
division is a product with the row's reciprocal corrected twice with fused multiply-adds (the
same IEEE result), and on CUDA the cast to e4m3 rounds by itself.

`_store_fp8_row` is that arithmetic for one row already in registers: the layer kernels that
produce a GEMM's input (`widebeam/kernels/layers/triton_fp8_layers.py`) end with it instead of
storing the row in the model dtype for this pass to read back."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from widebeam.kernels.fp8.quantize import (
    FP8_DTYPE,
    FP8_MAX,
    INV_FP8_MAX,
    MIN_SCALE,
    Fp8Rows,
    padded,
)

# Rows (their FP8 width) wider than this are read in chunks of this many columns, twice (a
# power of two). bench/fp8_gemm.py part 2 times it against one pass over the whole row.
QUANT_MAX_CHUNK = 2048
MAX_WARPS = 16


def warps_for(block: int) -> int:
    """Warps for a program over `block` columns: 16 elements a thread (two 16-byte loads of
    bf16), up to MAX_WARPS. Measured on the H200: 4 warps over 2,048 columns beat 8 (the
    quantization of 6,144 x 2,048 12.6 against 14.1 us), 16 over a whole 8,192-lane row beat
    8 and 32 (the fused SiLU product 71.6 against 81.1 and 77.0 us). Only for kernels whose
    reductions are maxima (exact in any order): the fused norms keep their unfused kernel's
    warps (`triton_fp8_layers._launch`)."""
    return max(1, min(MAX_WARPS, block // 512))


def chunking(q_width: int, max_chunk: int) -> dict[str, int | bool]:
    """The launch of a one-program-per-row kernel over rows of `q_width` FP8 columns: CHUNK
    columns per step (a power of two), ONE_CHUNK when the row fits in one (read once), and the
    warps."""
    if max_chunk < 1 or max_chunk & (max_chunk - 1):
        raise ValueError(f"max_chunk must be a power of two, got {max_chunk}")
    whole = triton.next_power_of_2(q_width)
    chunk = min(whole, max_chunk)
    return {"CHUNK": chunk, "ONE_CHUNK": chunk == whole, "num_warps": warps_for(chunk)}


@triton.jit
def _quantize_rows_kernel(
    x_ptr, q_ptr, scale_ptr, width, q_width, stride_x, stride_q, min_scale, fp8_max,
    inv_fp8_max,
    CHUNK: tl.constexpr, ONE_CHUNK: tl.constexpr, ROUND_IN_FP32: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    q_row = q_ptr + row * stride_q
    cols = tl.arange(0, CHUNK)
    if ONE_CHUNK:
        x = tl.load(x_row + cols, mask=cols < width, other=0.0).to(tl.float32)
        _store_fp8_row(
            x, cols, q_row, scale_ptr + row, q_width, min_scale, fp8_max, inv_fp8_max,
            ROUND_IN_FP32,
        )  # fmt: skip
    else:
        amax = tl.zeros([CHUNK], dtype=tl.float32)
        for start in range(0, width, CHUNK):
            x = tl.load(x_row + start + cols, mask=start + cols < width, other=0.0)
            amax = tl.maximum(amax, tl.abs(x.to(tl.float32)))
        scale = _row_scale(tl.max(amax, axis=0), min_scale, inv_fp8_max)
        tl.store(scale_ptr + row, scale)
        inv_scale = tl.math.div_rn(1.0, scale)
        for start in range(0, q_width, CHUNK):  # the padding past `width` reads as zeros
            x = tl.load(x_row + start + cols, mask=start + cols < width, other=0.0)
            q = _to_fp8(x.to(tl.float32), scale, inv_scale, fp8_max, ROUND_IN_FP32)
            tl.store(q_row + start + cols, q, mask=start + cols < q_width)


@triton.jit
def _quantize_heads_kernel(
    x_ptr, q_ptr, scale_ptr, heads, stride_xr, stride_xh, min_scale, fp8_max, inv_fp8_max,
    D: tl.constexpr, BLOCK_H: tl.constexpr, ROUND_IN_FP32: tl.constexpr,
):  # fmt: skip
    """All heads of one token, each head a row of `quantize_rows`: [BLOCK_H, D] in one tile."""
    row = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, BLOCK_H)[:, None]
    d = tl.arange(0, D)[None, :]
    inside = h < heads
    x = tl.load(x_ptr + row * stride_xr + h * stride_xh + d, mask=inside, other=0.0)
    x = x.to(tl.float32)
    scale = _row_scale(tl.max(tl.abs(x), axis=1), min_scale, inv_fp8_max)[:, None]
    tl.store(scale_ptr + row * heads + h, scale, mask=inside)
    q = _to_fp8(x, scale, tl.math.div_rn(1.0, scale), fp8_max, ROUND_IN_FP32)
    tl.store(q_ptr + (row * heads + h) * D + d, q, mask=inside)


def quantize_heads_triton(
    x: torch.Tensor,  # [rows, heads, D] model dtype (or fp32), D a power of two, unit stride
) -> tuple[torch.Tensor, torch.Tensor]:  # [rows, heads, D] float8_e4m3fn, [rows, heads] fp32
    """Each (row, head) of x quantized as a row of `quantize.quantize_rows` (the same bytes and
    scales), one program per row over all its heads: a row of `quantize_rows_triton` per head
    would be a program of D columns, too little work to reach the memory's rate."""
    rows, heads, dim = x.shape
    if dim & (dim - 1) or x.stride(2) != 1:
        raise ValueError(f"head_dim must be a power of two with unit stride, got {dim}")
    q = torch.empty(x.shape, dtype=FP8_DTYPE, device=x.device)
    scale = torch.empty(rows, heads, dtype=torch.float32, device=x.device)
    if rows and heads:
        block_h = triton.next_power_of_2(heads)
        _quantize_heads_kernel[(rows,)](
            x, q, scale, heads, x.stride(0), x.stride(1), MIN_SCALE, FP8_MAX, INV_FP8_MAX,
            D=dim, BLOCK_H=block_h, ROUND_IN_FP32=not x.is_cuda,
            num_warps=warps_for(block_h * dim),
        )  # fmt: skip
    return q, scale


@triton.jit
def _row_scale(amax, min_scale, inv_fp8_max):
    """A row's scale from its amax: a product with `inv_fp8_max` (fp32(1 / 448),
    `quantize.INV_FP8_MAX`), as the reference's."""
    return tl.maximum(amax, min_scale) * inv_fp8_max


@triton.jit
def _store_fp8_row(
    x, cols, q_row_ptr, scale_row_ptr, q_width, min_scale, fp8_max, inv_fp8_max,
    ROUND_IN_FP32: tl.constexpr,
):  # fmt: skip
    """x: one row, fp32 [BLOCK], lanes past the row's width 0 -> its scale at `scale_row_ptr`
    and its FP8 values at `q_row_ptr` [q_width] (the zero lanes become the zero padding)."""
    scale = _row_scale(tl.max(tl.abs(x), axis=0), min_scale, inv_fp8_max)
    tl.store(scale_row_ptr, scale)
    q = _to_fp8(x, scale, tl.math.div_rn(1.0, scale), fp8_max, ROUND_IN_FP32)
    tl.store(q_row_ptr + cols, q, mask=cols < q_width)


@triton.jit
def _to_fp8(x, scale, inv_scale, fp8_max, ROUND_IN_FP32: tl.constexpr):
    """fp32 x -> x / scale IEEE-rounded (as torch's tensor division, on every device), clamped
    to ±fp8_max, rounded to e4m3 (ties to even) as float8e4nv. `inv_scale`: 1 / scale rounded
    to fp32 (one `div_rn` per row).

    The quotient: q = x * inv_scale is within ~1.5 ulp of x / scale; a Markstein correction
    q + (x - q * scale) * inv_scale, its remainder exact in a fused multiply-add, makes a
    faithful quotient the correctly rounded one (Markstein's theorem, with inv_scale correctly
    rounded); two of them make the first faithful and the second exact, 5 instructions
    against `div_rn`'s ~10 with a reciprocal on the special-function unit (checked against
    IEEE division over every significand of x for 20 scales: no difference after one step
    already). A zero quotient takes x's sign, as IEEE division gives it (the correction would
    turn -0 into +0). Quotients too small for the theorem (underflow) are far below e4m3's
    smallest value (2^-9) and round to a zero of x's sign either way.

    The cast: compiled, Triton's fp32 -> float8e4nv is round-to-nearest-even
    (`cvt.rn.satfinite`), torch's rounding; Triton's interpreter rounds it otherwise, so there
    (`ROUND_IN_FP32`, CPU tensors) the value is first rounded to e4m3 in fp32 and the cast is
    exact."""
    q = x * inv_scale
    q = tl.fma(tl.fma(-q, scale, x), inv_scale, q)
    q = tl.fma(tl.fma(-q, scale, x), inv_scale, q)
    q = tl.where(q == 0.0, x * 0.0, q)
    q = tl.minimum(tl.maximum(q, -fp8_max), fp8_max)
    if ROUND_IN_FP32:
        q = round_to_e4m3(q)
    return q.to(tl.float8e4nv)


@triton.jit
def round_to_e4m3(v):
    """fp32 `v` (|v| <= 448) rounded to the nearest e4m3 value, ties to even, still in fp32: the
    cast to FP8 that follows is then exact everywhere. (Triton's interpreter, the CPU tests'
    path, rounds that cast differently from the GPU's round-to-nearest-even.) A value that
    rounds to zero keeps its sign, as the cast's own rounding keeps it."""
    exponent = ((v.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    exponent = tl.maximum(exponent, -6)  # e4m3's smallest normal exponent; below: subnormals
    step = ((exponent - 3 + 127) << 23).to(tl.float32, bitcast=True)  # 3 mantissa bits
    inv_step = ((3 - exponent + 127) << 23).to(tl.float32, bitcast=True)  # 1 / step, exact
    # |v / step| < 16, an exact product: adding and removing 1.5 * 2^23 rounds it to an
    # integer, ties to even
    whole = (v * inv_step + 12582912.0) - 12582912.0
    return tl.where(whole == 0.0, v * 0.0, whole * step)


def quantize_rows_triton(
    x: torch.Tensor,  # [rows, k] model dtype (or fp32)
    cols: int | None = None,
    max_chunk: int = QUANT_MAX_CHUNK,  # wider rows: two passes over chunks of this many columns
) -> Fp8Rows:
    """x (unit stride along k) -> FP8 rows zero-padded to `cols` (default: k rounded up to
    FP8_ALIGN), with their scales [rows, 1] fp32. The same bytes for any `max_chunk`."""
    width = padded(x.shape[1]) if cols is None else cols
    if width < x.shape[1]:
        raise ValueError(f"FP8 width {width} is narrower than the row ({x.shape[1]})")
    if x.stride(1) != 1:
        x = x.contiguous()
    q = torch.empty(x.shape[0], width, dtype=FP8_DTYPE, device=x.device)
    scale = torch.empty(x.shape[0], 1, dtype=torch.float32, device=x.device)
    if x.shape[0]:
        _quantize_rows_kernel[(x.shape[0],)](
            x, q, scale, x.shape[1], width, x.stride(0), q.stride(0), MIN_SCALE, FP8_MAX,
            INV_FP8_MAX, ROUND_IN_FP32=not x.is_cuda, **chunking(width, max_chunk),
        )  # fmt: skip
    return Fp8Rows(q, scale)
