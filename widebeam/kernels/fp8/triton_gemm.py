"""A W8A8 FP8 GEMM in Triton with the row-wise scales in its epilogue: `out[m, n] = (sum_k
a[m, k] b[n, k]) * a_scale[m] * b_scale[n]` rounded to the model dtype, `torch._scaled_mm`'s
row-wise result (and `torch_ref.fp8_matmul_ref`'s order of the two scale products).

Why a second GEMM: `bench/fp8_gemm.py` times it beside `torch._scaled_mm` at the decoder's
shapes, where the short-K GEMMs (o: 2048 x 2048) gained nothing from FP8. On Hopper Triton
lowers an FP8 `tl.dot` to wgmma; both operands arrive through TMA descriptors (`[tokens, in]`
and the weight `[out, in]`, both K-contiguous as FP8 wgmma wants them), the output is stored
with a mask, so an unpadded `[tokens, out]` result needs no slice and copy.

`TileConfig.precise`: by default Triton lets Hopper's tensor cores accumulate FP8 products in
their reduced internal precision for the whole K loop (`torch._scaled_mm`'s
`use_fast_accum=True`); precise configs add each BLOCK_K partial sum to the fp32 accumulator.
`persistent`: one program per SM looping over output tiles instead of one program per tile.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from widebeam.kernels.fp8.quantize import Fp8Rows, Fp8Weight


@dataclass(frozen=True)
class TileConfig:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int = 8  # output tiles walked in groups of this many rows of tiles (L2 reuse)
    persistent: bool = False
    precise: bool = False

    @property
    def name(self) -> str:
        flags = ("p" if self.persistent else "") + ("x" if self.precise else "")
        shape = f"{self.block_m}x{self.block_n}x{self.block_k}"
        return f"{shape}w{self.num_warps}s{self.num_stages}" + (f"-{flags}" if flags else "")


# The configurations the bench tries (a small list: each is one compilation on the device).
# FP8 tiles are half the bytes of bf16 ones, so 128-wide K blocks and 3-4 stages fit Hopper's
# shared memory (128 x 256 x 128 x 3 stages: 144 KiB).
CONFIGS: tuple[TileConfig, ...] = (
    TileConfig(128, 128, 128, num_warps=8, num_stages=4),
    TileConfig(128, 256, 128, num_warps=8, num_stages=3),
    TileConfig(64, 128, 128, num_warps=4, num_stages=5),
    TileConfig(128, 64, 128, num_warps=4, num_stages=5),
    TileConfig(256, 128, 128, num_warps=8, num_stages=3),
    TileConfig(128, 128, 128, num_warps=8, num_stages=4, persistent=True),
    TileConfig(128, 256, 128, num_warps=8, num_stages=3, persistent=True),
    TileConfig(128, 128, 128, num_warps=8, num_stages=4, precise=True),
)


def default_config(rows: int, out: int, sms: int) -> TileConfig:
    """The tile for `rows` x `out` outputs: 64-row tiles while 128-row ones would leave SMs
    idle (the same rule `torch._scaled_mm`'s CUTLASS path uses), 128 x 128 otherwise."""
    if triton.cdiv(rows, 128) * triton.cdiv(out, 128) < sms:
        return CONFIGS[2]
    return CONFIGS[0]


@triton.jit
def _tile(
    a_desc, b_desc, out_ptr, a_scale_ptr, b_scale_ptr, tile, M, N, K, stride_out,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PRECISE: tl.constexpr,
):  # fmt: skip
    """Output tile number `tile` (grouped order): its K loop and its scaled, masked store."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    group = tile // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (tile % group_rows)
    pid_n = (tile % (GROUP_M * tiles_n)) // group_rows
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([off_m, k * BLOCK_K])  # [BLOCK_M, BLOCK_K] e4m3, out of bounds: 0
        b = b_desc.load([off_n, k * BLOCK_K])  # [BLOCK_N, BLOCK_K] e4m3
        if PRECISE:  # noqa: SIM108 (a static branch: the compiler keeps one dot)
            acc = tl.dot(a, b.T, acc, max_num_imprecise_acc=BLOCK_K)
        else:
            acc = tl.dot(a, b.T, acc)
    rows = off_m + tl.arange(0, BLOCK_M)
    cols = off_n + tl.arange(0, BLOCK_N)
    a_scale = tl.load(a_scale_ptr + rows, mask=rows < M, other=0.0)  # [BLOCK_M] fp32
    b_scale = tl.load(b_scale_ptr + cols, mask=cols < N, other=0.0)  # [BLOCK_N] fp32
    out = (acc * a_scale[:, None]) * b_scale[None, :]
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    dst = out_ptr + rows[:, None].to(tl.int64) * stride_out + cols[None, :]
    tl.store(dst, out.to(out_ptr.dtype.element_ty), mask=inside)


@triton.jit(do_not_specialize=["programs"])
def _fp8_gemm_kernel(
    a_desc, b_desc, out_ptr, a_scale_ptr, b_scale_ptr, M, N, K, stride_out, programs,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PERSISTENT: tl.constexpr, PRECISE: tl.constexpr,
):  # fmt: skip
    if PERSISTENT:
        tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
        for tile in range(tl.program_id(0), tiles, programs):
            _tile(
                a_desc, b_desc, out_ptr, a_scale_ptr, b_scale_ptr, tile, M, N, K, stride_out,
                BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PRECISE,
            )  # fmt: skip
    else:
        _tile(
            a_desc, b_desc, out_ptr, a_scale_ptr, b_scale_ptr, tl.program_id(0), M, N, K,
            stride_out, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PRECISE,
        )  # fmt: skip


@functools.cache
def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 4  # Triton's interpreter: a few programs still exercise the persistent loop
    return torch.cuda.get_device_properties(device).multi_processor_count


def triton_fp8_matmul(
    rows: Fp8Rows,  # activations: data [tokens, padded in] e4m3, scale [tokens, 1] fp32
    weight: Fp8Weight,
    bias: torch.Tensor | None,  # [out] model dtype
    out_dtype: torch.dtype,  # the model dtype
    config: TileConfig | None = None,  # None: default_config
    precise: bool = False,  # with config None: default_config's tile, promoted accumulation
) -> torch.Tensor:  # [tokens, out] out_dtype, contiguous
    tokens, k = rows.data.shape
    if weight.data.shape[1] != k:
        raise ValueError(f"rows of width {k} for a weight of width {weight.data.shape[1]}")
    sms = _sm_count(rows.data.device)
    cfg = config
    if cfg is None:
        cfg = default_config(tokens, weight.out_features, sms)
        cfg = dataclasses.replace(cfg, precise=True) if precise else cfg
    out = torch.empty(tokens, weight.out_features, dtype=out_dtype, device=rows.data.device)
    if tokens == 0:
        return out if bias is None else out + bias
    a_desc = TensorDescriptor.from_tensor(rows.data, [cfg.block_m, cfg.block_k])
    b_desc = TensorDescriptor.from_tensor(weight.data, [cfg.block_n, cfg.block_k])
    tiles = triton.cdiv(tokens, cfg.block_m) * triton.cdiv(weight.out_features, cfg.block_n)
    programs = min(tiles, sms) if cfg.persistent else tiles
    _fp8_gemm_kernel[(programs,)](
        a_desc, b_desc, out, rows.scale, weight.scale, tokens, weight.out_features, k,
        out.stride(0), programs,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        PERSISTENT=cfg.persistent, PRECISE=cfg.precise,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    return out if bias is None else out + bias
