"""Kernel micro-benchmarks: every Triton kernel against its torch reference at workload shapes.

    python kernels.py [--only attention,padding,tree,prefill,logits,layers,kv,fp8kv,fp8prefill,
        prefix] [--reps 50]
        [--no-flush] [--rows-per-program 1,auto] [--suffix-warps auto] [--block-s auto]
        [--suffix-stages auto] [--shared-block-n auto] [--shared-programs auto]
        [--shared-warps auto] [--tree-split 8:8] [--tree-rows auto] [--tag SUFFIX] [--smoke]

Each call is timed on the device with its own pair of CUDA events, after warm-up, with the GPU
queue held by a sleep kernel while the host enqueues (so Python launch overhead is not timed)
and, unless `--no-flush`, L2 flushed before each call; the median is reported. Outputs are
compared with the reference once per case ("check"). Attention rows also give the per-kernel
device time (torch profiler) of the prefix and suffix-merge kernels; GB/s counts the bytes a
kernel must move at least (KV read once per request / row, q, out, fp32 partials) against the
H200's ~4.8 TB/s.

The suffix-merge kernel's tile options are swept as the product of the comma lists given (auto =
the library default), so one device call can compare them; `--rows-per-program 1` is the
one-row-per-program degenerate case. `--smoke` runs tiny shapes on the CPU (Triton interpreter,
host timers) to check the script itself.

Adding a kernel: write a function that returns a list of `Case` and add it to `GROUPS`.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch
from smoke_interpreter import use_interpreter_for_smoke

SMOKE = use_interpreter_for_smoke()  # before any kernel module is imported

from harness import environment, markdown_table, write_json  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
# The cases' model dtype: the interpreter's smoke runs take fp32 (its bf16 dot is wrong);
# kernel_resources.py sets bf16 to compile the device's kernels on the CPU.
DTYPE = torch.bfloat16 if DEVICE.type == "cuda" else torch.float32
HBM_GBS = 4800.0  # H200 HBM3e peak
QWEN3 = {"0.6b": (16, 8, 128), "1.7b": (16, 8, 128)}  # q heads, kv heads, head_dim
VOCAB = 151936


@dataclass
class Case:
    kernel: str
    shape: str
    triton: Callable[[], object]
    torch: Callable[[], object] | None = None
    bytes: float = 0.0  # bytes the Triton kernel(s) must move at least; 0 = not reported
    flops: float = 0.0
    check: Callable[[object, object], str] | None = None  # (triton out, torch out) -> "ok"/...
    breakdown: tuple[str, ...] = ()  # kernel names to time separately (profiler)
    kernel_bytes: dict[str, float] = field(default_factory=dict)  # per breakdown kernel
    torch_key: str = ""  # cases with the same key share one torch timing


def close(tol: dict[str, float]) -> Callable[[object, object], str]:
    def check(a: object, b: object) -> str:
        pairs = zip(a, b, strict=True) if isinstance(a, tuple) else [(a, b)]
        for x, y in pairs:
            if x is None:
                continue
            try:
                torch.testing.assert_close(x.float(), y.float(), **tol)  # type: ignore[union-attr]
            except AssertionError as err:
                return "MISMATCH " + str(err).splitlines()[-1][:60]
        return "ok"

    return check


def close_with_error(tol: dict[str, float]) -> Callable[[object, object], str]:
    """`close`'s check, its "ok" followed by the largest absolute difference."""
    within = close(tol)

    def check(a: object, b: object) -> str:
        verdict = within(a, b)
        if verdict != "ok":
            return verdict
        err = (a.float() - b.float()).abs().max().item()  # type: ignore[union-attr]
        return f"ok, max |err| {err:.2e}"

    return check


# ----------------------------------------------------------------------------- attention decode


def decode_inputs(groups: list[tuple[int, int, int]], heads: tuple[int, int, int], seed: int):
    """KV cache + DecodeBatch: groups of (rows, prompt_len, suffix_len); prompts start on 16-slot
    pages (as the engine lays them out), every slot distinct (no beam sharing: the worst case)."""
    from widebeam.kernels.attention.metadata import DecodeBatch, DecodeGroup

    q_heads, kv_heads, dim = heads
    gen = torch.Generator().manual_seed(seed)
    page = 16
    prompt_pages = sum(-(-p // page) for _, p, _ in groups)
    suffix_slots = sum(r * s for r, _, s in groups)
    num_slots = (prompt_pages + 1) * page + suffix_slots
    pages = torch.randperm(prompt_pages, generator=gen)
    rest = torch.randperm(suffix_slots, generator=gen) + prompt_pages * page
    made, row, next_page, next_slot = [], 0, 0, 0
    for rows, prompt, suffix in groups:
        n = -(-prompt // page)
        slots = (pages[next_page : next_page + n, None] * page + torch.arange(page)).reshape(-1)
        sfx = rest[next_slot : next_slot + rows * suffix].reshape(rows, suffix)
        made.append(DecodeGroup(row, rows, slots[:prompt].to(DEVICE), sfx.to(DEVICE)))
        next_page, next_slot, row = next_page + n, next_slot + rows * suffix, row + rows
    dtype = DTYPE
    on_device = torch.Generator(DEVICE).manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=on_device, device=DEVICE).to(dtype)

    k_cache, v_cache = rand(num_slots, kv_heads, dim), rand(num_slots, kv_heads, dim)
    return rand(row, q_heads, dim), k_cache, v_cache, DecodeBatch(tuple(made))


def pack(
    batch,
    rows: int,
    heads: tuple[int, int, int],
    tree_rows: int = 0,
    tree_split=None,
    block_rows: int | None = None,
):
    """The engine's packing: page tables, default block_rows (unless given) / splits, suffix
    capacity bucketed to a power of two >= 8 (`runner/decode_graphs.py`); `tree_rows` > 0: with
    the shared-suffix plan (`suffix_tree`)."""
    from widebeam.kernels.attention.packed import pack_decode
    from widebeam.kernels.attention.triton_common import default_block_rows, default_num_splits

    q_heads, kv_heads, _ = heads
    widest = max(g.num_rows for g in batch.groups)
    block_rows = block_rows or default_block_rows(q_heads, kv_heads, widest)
    items = sum(-(-g.num_rows // block_rows) for g in batch.groups)
    longest = max(int(g.prompt_slots.shape[0]) for g in batch.groups)
    splits = default_num_splits(items * kv_heads, longest, DEVICE)
    suffix = max(int(g.suffix_slots.shape[1]) for g in batch.groups)
    cap = max(8, triton_next_pow2(suffix))
    return pack_decode(
        batch, rows, block_rows=block_rows, num_splits=splits, page_size=16, suffix_capacity=cap,
        tree_rows=tree_rows, **({"tree_split": tree_split} if tree_split else {}),
    )  # fmt: skip


def triton_next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def variants(args: argparse.Namespace) -> list[dict[str, int | None]]:
    def ints(text: str) -> list[int | None]:
        return [None if v == "auto" else int(v) for v in text.split(",")]

    keys = ("rows_per_program", "num_warps", "block_s", "num_stages")
    lists = (args.rows_per_program, args.suffix_warps, args.block_s, args.suffix_stages)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*map(ints, lists))]


def decode_cases(
    name: str, groups: list[tuple[int, int, int]], heads: tuple[int, int, int], args
) -> list[Case]:
    from widebeam.kernels.attention.torch_ref import cascade_decode
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed, suffix_tiles

    q, k_cache, v_cache, batch = decode_inputs(groups, heads, seed=len(groups))
    rows, (q_heads, kv_heads, dim) = q.shape[0], heads
    packed = pack(batch, rows, heads)
    scale = dim**-0.5
    width = k_cache.element_size()
    splits, cap = packed.num_splits, packed.row_suffix_slots.shape[1]
    kv_row = kv_heads * dim * width * 2  # K and V of one slot
    q_bytes = rows * q_heads * dim * width
    parts = splits * rows * q_heads * (dim + 1) * 4
    suffix_kv = sum(r * s for r, _, s in groups) * kv_row
    prompt_kv = sum(p for _, p, _ in groups) * kv_row
    suffix_bytes = 2 * q_bytes + suffix_kv + parts + rows * (8 + 4 * cap)
    prefix_bytes = q_bytes + prompt_kv + parts
    shape = (
        f"{name}: R {rows}, G {len(groups)}, P {groups[0][1]}, s {groups[0][2]}, splits {splits}"
    )
    cases = []
    for var in variants(args):
        rpp, bs = var["rows_per_program"], var["block_s"]
        fast = q.dtype != torch.float32  # as cascade_decode_packed decides
        tile = suffix_tiles(rows, kv_heads, q_heads // kv_heads, cap, rpp, bs, fast)
        label = (
            f"R/prog {'auto ' * (rpp is None)}{tile[0]}, S tile {'auto ' * (bs is None)}{tile[1]}"
            f", warps {var['num_warps'] or 'auto 4'}"
        )
        if var["num_stages"] is not None:
            label += f", stages {var['num_stages']}"
        opts = {key: value for key, value in var.items() if value is not None}

        def run(opts: dict[str, int] = opts) -> torch.Tensor:
            return cascade_decode_packed(q, k_cache, v_cache, packed, scale, **opts)

        cases.append(
            Case(
                kernel=f"cascade decode ({label})",
                shape=shape,
                triton=run,
                torch=lambda: cascade_decode(q, k_cache, v_cache, batch, scale),
                bytes=suffix_bytes + prefix_bytes,
                check=close({"rtol": 2e-2, "atol": 2e-2}),
                breakdown=("prefix_kernel", "_suffix_merge_kernel"),
                kernel_bytes={"prefix_kernel": prefix_bytes, "_suffix_merge_kernel": suffix_bytes},
                torch_key=shape,
            )
        )
    return cases


def attention(args: argparse.Namespace) -> list[Case]:
    if args.smoke:
        return decode_cases("smoke", [(40, 20, 3), (9, 5, 11)], (4, 2, 32), args)
    cases = []
    for s in (1, 8, 16, 64):  # W1: Qwen3-0.6B, beam 5000 in one request, 64-token prompt
        cases += decode_cases("W1", [(5000, 64, s)], QWEN3["0.6b"], args)
    # W3-like: Qwen3-1.7B, 64 requests of 50 beams, ~100-token prompts, 3rd token
    cases += decode_cases("W3", [(50, 100, 3)] * 64, QWEN3["1.7b"], args)
    return cases


def beam_tree_inputs(rows: int, prompt: int, steps: int, heads: tuple[int, int, int], seed: int):
    """One wide request whose suffixes come from `suffix_sharing.simulated_tables` (a beam
    search without a model, sharing about as much as W1's). Returns (q, k_cache, v_cache,
    DecodeBatch)."""
    from suffix_sharing import simulated_tables

    from widebeam.kernels.attention.metadata import DecodeBatch, DecodeGroup

    q_heads, kv_heads, dim = heads
    gen = torch.Generator().manual_seed(seed)
    page = 16
    *_, table = simulated_tables(rows, steps, seed)
    prompt_slots = torch.arange(prompt)  # pages 0.. (a page-aligned prompt)
    base = -(-prompt // page) * page
    shuffle = torch.randperm(rows * steps, generator=gen) + base  # suffix slots scattered
    suffix = shuffle[table]
    group = DecodeGroup(0, rows, prompt_slots.to(DEVICE), suffix.to(DEVICE))
    dtype = DTYPE
    on_device = torch.Generator(DEVICE).manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=on_device, device=DEVICE).to(dtype)

    num_slots = base + rows * steps
    k_cache, v_cache = rand(num_slots, kv_heads, dim), rand(num_slots, kv_heads, dim)
    return rand(rows, q_heads, dim), k_cache, v_cache, DecodeBatch((group,))


def tree(args: argparse.Namespace) -> list[Case]:
    """W1's decode attention with beams that share generated tokens: every row alone against
    the shared-suffix plan, its kernel's options swept (--shared-block-n, --shared-programs,
    --shared-warps, --shared-registers), and the plan's own device time."""
    from widebeam.kernels.attention.suffix_tree import ITEM_ROWS, SplitRule, plan_suffix_tree
    from widebeam.kernels.attention.torch_ref import cascade_decode
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed

    def ints(text: str) -> list[int | None]:
        return [None if v == "auto" else int(v) for v in text.split(",")]

    heads = (4, 2, 32) if args.smoke else QWEN3["0.6b"]
    shapes = [(40, 20, 20)] if args.smoke else [(5000, 64, s) for s in (32, 64, 128)]
    sweep = list(
        itertools.product(
            ints(args.shared_block_n),
            ints(args.shared_programs),
            ints(args.shared_warps),
            ints(args.shared_registers),
        )
    )
    rules = [SplitRule(*map(int, pair.split(":"))) for pair in args.tree_split.split(",")]
    tree_rows = [ITEM_ROWS if v is None else v for v in ints(args.tree_rows)]
    cases = []
    for rows, prompt, steps in shapes:
        q, k_cache, v_cache, batch = beam_tree_inputs(rows, prompt, steps, heads, seed=steps)
        scale = heads[2] ** -0.5
        shape = f"W1 beam tree: R {rows}, P {prompt}, s {steps}"
        layouts: list[tuple[str, object, dict[str, int]]] = [
            ("rows alone", pack(batch, rows, heads), {})
        ]
        for rule, item_rows in itertools.product(rules, tree_rows):
            shared = pack(batch, rows, heads, tree_rows=item_rows, tree_split=rule)
            assert shared.tree is not None
            items = int(shared.tree.num_items)
            for bn, pps, warps, registers in sweep:
                named = {
                    "shared_block_n": bn, "shared_programs_per_sm": pps, "shared_warps": warps,
                    "shared_max_registers": registers,
                }  # fmt: skip
                label = (
                    f"shared: split {rule.private_min}:{rule.align}, {items} items of "
                    f"{item_rows} rows, N tile {bn or 'auto'}, programs/SM {pps or 'auto'}, "
                    f"warps {warps or 'auto'}, registers "
                    + ("the compiler's" if registers == 0 else str(registers or "auto"))
                )
                opts = {k: v for k, v in named.items() if v is not None}
                layouts.append((label, shared, opts))
        for label, packed, opts in layouts:

            def run(  # type: ignore[no-untyped-def]
                packed=packed, opts=opts, q=q, k=k_cache, v=v_cache, sc=scale
            ) -> torch.Tensor:
                return cascade_decode_packed(q, k, v, packed, sc, **opts)

            cases.append(
                Case(
                    kernel=f"cascade decode ({label})",
                    shape=shape,
                    triton=run,
                    torch=lambda q=q, k=k_cache, v=v_cache, b=batch, sc=scale: cascade_decode(
                        q, k, v, b, sc
                    ),
                    check=close({"rtol": 2e-2, "atol": 2e-2}),
                    breakdown=("prefix_kernel", "shared_suffix_kernel", "_suffix_merge_kernel"),
                    torch_key=shape,
                )
            )
        slots, lengths = shared.row_suffix_slots, shared.row_suffix_len  # (any rule's)
        cases.append(
            Case(
                kernel="suffix_tree plan (sort rows by ancestor, items)",
                shape=shape,
                triton=lambda s=slots, n=lengths: plan_suffix_tree(s, n, ITEM_ROWS).order,
            )
        )
    return cases


def padding_cases(
    name: str,
    groups: list[tuple[int, int, int]],
    rows: int,  # the decode bucket's rows (>= the groups' rows: the rest are padding rows)
    layouts: list[tuple[str, int, int | None, int | None]],  # label, block_rows, work, splits
    heads: tuple[int, int, int],
) -> list[Case]:
    """One batch packed several ways: a CUDA-graph bucket's work-item capacity (None: tight),
    block size and split count (None: the default choice for the batch's items)."""
    from widebeam.kernels.attention.packed import PackedDecode, pack_decode
    from widebeam.kernels.attention.torch_ref import cascade_decode
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed
    from widebeam.kernels.attention.triton_common import default_num_splits

    q, k_cache, v_cache, batch = decode_inputs(groups, heads, seed=len(groups))
    real = q.shape[0]
    q = torch.cat([q, q.new_zeros(rows - real, *q.shape[1:])])
    scale = heads[2] ** -0.5
    shape = f"{name}: R {rows}, G {len(groups)}, P {groups[0][1]}"
    cases = []
    for label, block_rows, work, splits in layouts:
        items = sum(-(-r // block_rows) for r, _, _ in groups)
        longest = max(p for _, p, _ in groups)
        splits = splits or default_num_splits(items * heads[1], longest, DEVICE)
        packed = pack_decode(
            batch, rows, block_rows=block_rows, num_splits=splits, page_size=16,
            device=DEVICE, num_work=max(work or items, items), suffix_capacity=8,
        )  # fmt: skip

        def run(packed: PackedDecode = packed) -> torch.Tensor:
            return cascade_decode_packed(q, k_cache, v_cache, packed, scale)[:real]

        cases.append(
            Case(
                kernel=f"cascade decode ({label}: {packed.work_group.shape[0]} work items, "
                f"block_rows {block_rows}, {splits} splits)",
                shape=shape,
                triton=run,
                torch=lambda: cascade_decode(q[:real], k_cache, v_cache, batch, scale),
                check=close({"rtol": 2e-2, "atol": 2e-2}),
                torch_key=shape,
            )
        )
    return cases


def padding(args: argparse.Namespace) -> list[Case]:
    """What a CUDA-graph bucket's padding costs the cascade: padding work items (a bucket sized
    by rows instead of by the batch), block sizes for narrow requests, split counts."""
    if args.smoke:
        tight = [("tight", 8, None, None), ("padded", 8, 64, None), ("2 splits", 8, None, 2)]
        return padding_cases("smoke", [(9, 20, 3), (5, 7, 2)], 16, tight, (4, 2, 32))
    heads = QWEN3["1.7b"]
    tight, padded = ("tight", 32, None, None), ("work = rows", 32)
    cases = []
    for width, count, rows in ((50, 12, 1024), (512, 12, 6144), (1000, 12, 12288)):
        cases += padding_cases(
            f"W3 n={width}", [(width, 300, 3)] * count, rows,
            [tight, (*padded, rows, None)], heads,
        )  # fmt: skip
    splits = [tight, (*padded, 256, None)] + [(f"{s} splits", 32, None, s) for s in (1, 8, 16)]
    cases += padding_cases("W2 single", [(256, 5000, 3)], 256, splits, heads)
    tiles = [("8-row tiles", 8, None, None), ("32-row tiles", 32, None, None)]
    cases += padding_cases("64 x beam 1", [(1, 512, 3)] * 64, 64, tiles, heads)
    cases += padding_cases("12 x beam 8", [(8, 300, 3)] * 12, 128, tiles, heads)
    return cases


# ----------------------------------------------------------------------------- ragged prefill


def prefill(args: argparse.Namespace) -> list[Case]:
    from widebeam.kernels.attention.torch_ref import causal_prefill
    from widebeam.kernels.attention.triton_common import gqa_padded
    from widebeam.kernels.attention.triton_prefill import prefill_work, ragged_causal_prefill

    heads = (4, 2, 32) if args.smoke else QWEN3["1.7b"]
    q_heads, kv_heads, dim = heads
    scale = dim**-0.5
    cases = []
    for tokens in (40,) if args.smoke else (1000, 5000):
        gen = torch.Generator().manual_seed(tokens)
        dtype = DTYPE
        q, k, v = (
            torch.randn(tokens, h, dim, generator=gen).to(DEVICE, dtype)
            for h in (q_heads, kv_heads, kv_heads)
        )
        cu = (0, tokens)
        block_q = max(64 // gqa_padded(q_heads, kv_heads), 1)
        work = prefill_work(cu, block_q, DEVICE)
        cases.append(
            Case(
                kernel="ragged causal prefill",
                shape=f"1 prompt x {tokens} tokens, heads {q_heads}/{kv_heads}/{dim}",
                triton=lambda q=q, k=k, v=v, cu=cu, work=work, block_q=block_q: (
                    ragged_causal_prefill(q, k, v, cu, scale, work=work, block_q=block_q)
                ),
                torch=lambda q=q, k=k, v=v, cu=cu: causal_prefill(q, k, v, cu, scale),
                bytes=tokens * (2 * q_heads + 2 * kv_heads) * dim * q.element_size(),
                flops=2.0 * q_heads * dim * tokens * tokens,  # QK and PV over the causal half
                check=close({"rtol": 2e-2, "atol": 2e-2}),
            )
        )
    return cases


# ----------------------------------------------------------------------------- logits stats


def logits(args: argparse.Namespace) -> list[Case]:
    from widebeam.kernels.beam.logits_stats import BLOCK, logits_stats_torch
    from widebeam.kernels.beam.triton_logits_stats import logits_stats_triton

    rows, vocab = (7, 1000) if args.smoke else (5000, VOCAB)
    x = torch.randn(rows, vocab, device=DEVICE).to(torch.bfloat16)
    blocks = -(-vocab // BLOCK)
    return [
        Case(
            kernel="logits stats (lse + block max)",
            shape=f"{rows} x {vocab} bf16",
            triton=lambda: tuple(logits_stats_triton(x, BLOCK, True)),
            torch=lambda: tuple(logits_stats_torch(x, BLOCK, True)),
            bytes=rows * vocab * 2 + rows * (blocks + 1) * 4,
            check=close({"rtol": 1e-4, "atol": 1e-4}),
        )
    ]


# ----------------------------------------------------------------------------- layers


def layers(args: argparse.Namespace) -> list[Case]:
    from widebeam.kernels.layers import torch_ref, triton_layers

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=DEVICE).to(torch.bfloat16)

    tol = close({"rtol": 2e-2, "atol": 2e-2})
    cases = []
    norm_shapes = [(7, 64)] if args.smoke else [(5000, 1024), (3200, 2048), (5000 * 24, 128)]
    for rows, dim in norm_shapes:  # hidden 0.6B / 1.7B; per-head q+k norm at 5000 rows
        x, w = rand(rows, dim), rand(dim)
        cases.append(
            Case(
                kernel="rms_norm",
                shape=f"{rows} x {dim} bf16",
                triton=lambda x=x, w=w: triton_layers.rms_norm_triton(x, w, 1e-6),
                torch=lambda x=x, w=w: torch_ref.rms_norm_ref(x, w, 1e-6),
                bytes=2 * x.numel() * 2 + dim * 2,
                check=tol,
            )
        )
    mlp_shapes = [(7, 96)] if args.smoke else [(5000, 3072), (3200, 6144)]
    for rows, inter in mlp_shapes:  # MLP of 0.6B at 5000 rows, 1.7B at 3200 rows
        gate, up = rand(rows, inter), rand(rows, inter)
        cases.append(
            Case(
                kernel="silu_mul",
                shape=f"{rows} x {inter} bf16",
                triton=lambda g=gate, u=up: triton_layers.silu_mul_triton(g, u),
                torch=lambda g=gate, u=up: torch_ref.silu_mul_ref(g, u),
                bytes=3 * gate.numel() * 2,
                check=tol,
            )
        )
        fused = rand(rows, 2 * inter)  # the engine's layout: halves of one gate_up GEMM
        halves = fused.chunk(2, dim=1)
        cases.append(
            Case(
                kernel="silu_mul (fused halves)",
                shape=f"{rows} x 2·{inter} bf16",
                triton=lambda h=halves: triton_layers.silu_mul_triton(*h),
                torch=lambda h=halves: torch_ref.silu_mul_ref(*h),
                bytes=3 * gate.numel() * 2,
                check=tol,
            )
        )
    return cases


def fp8_kv_cases(name: str, groups: list[tuple[int, int, int]], heads: tuple[int, int, int]):
    """Cascade decode over one layer's cache in the model dtype, then in FP8 with the prefix
    kernel's dots in bf16, in fp16 and as `triton_common.fp8_kv_dot` chooses; the FP8 rows are
    checked against the torch reference over the same FP8 values, the largest error printed."""
    from widebeam.kernels.attention.torch_ref import cascade_decode
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed
    from widebeam.kernels.kv.fp8_kv import KvScales, quantize_kv

    q, k_cache, v_cache, batch = decode_inputs(groups, heads, seed=len(groups))
    rows, (_, kv_heads, dim) = q.shape[0], heads
    packed = pack(batch, rows, heads)
    scale = dim**-0.5
    scales = KvScales.of(
        *(x.float().abs().amax(dim=(0, 2)) / 448 for x in (k_cache, v_cache))  # [Hkv] fp32
    )
    k8, v8 = quantize_kv(k_cache, scales.k_inv), quantize_kv(v_cache, scales.v_inv)
    shape = f"{name}: R {rows}, G {len(groups)}, P {groups[0][1]}, s {groups[0][2]}"
    prompt_slots = sum(p for _, p, _ in groups)
    cases = [
        Case(
            kernel=f"cascade decode, {str(q.dtype).removeprefix('torch.')} KV",
            shape=shape,
            triton=lambda: cascade_decode_packed(q, k_cache, v_cache, packed, scale),
            torch=lambda: cascade_decode(q, k_cache, v_cache, batch, scale),
            bytes=prompt_slots * kv_heads * dim * 2 * k_cache.element_size(),
            check=close_with_error({"rtol": 2e-2, "atol": 2e-2}),
            breakdown=("prefix_kernel", "_suffix_merge_kernel"),
            torch_key=shape + " model dtype",
        )
    ]
    for dot in (torch.bfloat16, torch.float16, None):
        chosen = "default" if dot is None else str(dot).removeprefix("torch.")
        cases.append(
            Case(
                kernel=f"cascade decode, FP8 KV, prefix dots {chosen}",
                shape=shape,
                triton=lambda dot=dot: cascade_decode_packed(
                    q, k8, v8, packed, scale, scales, fp8_dot=dot
                ),
                torch=lambda: cascade_decode(q, k8, v8, batch, scale, scales),
                bytes=prompt_slots * kv_heads * dim * 2,
                check=close_with_error({"rtol": 2e-2, "atol": 2e-2}),
                breakdown=("prefix_kernel", "_suffix_merge_kernel"),
                torch_key=shape + " fp8",
            )
        )
    return cases


def fp8_kv(args: argparse.Namespace) -> list[Case]:
    if args.smoke:
        return fp8_kv_cases("smoke", [(40, 20, 3), (9, 5, 11)], (4, 2, 32))
    heads = QWEN3["1.7b"]
    cases = fp8_kv_cases("W2 ctx 5000", [(256, 5000, 2)], heads)
    cases += fp8_kv_cases("W4 n=1000", [(1000, 2451, 2)] * 4, heads)
    cases += fp8_kv_cases("W4 n=50", [(50, 2451, 2)] * 32, heads)
    return cases + fp8_kv_cases("W3 n=50", [(50, 301, 2)] * 64, heads)


def fp8_prefill_cases(name: str, lengths: list[int], heads: tuple[int, int, int]) -> list[Case]:
    """One layer of a prefill's KV path: the KV write, then the causal prefill over what the
    write stored. A model-dtype cache; an FP8 one whose write keeps its rows in FP8 and the
    prefill widens them first (two copies); and the engine's way, the write keeping them
    already widened to the model dtype (`KVCache.write_rows`). Checked against the torch
    reference over the same FP8 values."""
    from widebeam.kernels.attention.torch_ref import causal_prefill
    from widebeam.kernels.attention.triton_common import gqa_padded
    from widebeam.kernels.attention.triton_prefill import prefill_work, ragged_causal_prefill
    from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE, KvScales, quantize_kv
    from widebeam.kernels.kv.triton_kv_write import write_kv_triton

    q_heads, kv_heads, dim = heads
    tokens = sum(lengths)
    cu = tuple(itertools.accumulate(lengths, initial=0))
    dtype = DTYPE
    gen = torch.Generator().manual_seed(tokens)
    qkv = torch.randn(tokens, (q_heads + 2 * kv_heads) * dim, generator=gen).to(DEVICE, dtype)
    q = qkv[:, : q_heads * dim].view(tokens, q_heads, dim)
    k = qkv[:, q_heads * dim : (q_heads + kv_heads) * dim].view(tokens, kv_heads, dim)
    v = qkv[:, (q_heads + kv_heads) * dim :].view(tokens, kv_heads, dim)
    slots = torch.randperm(2 * tokens, generator=gen)[:tokens].to(DEVICE)
    scales = KvScales.of(*(x.float().abs().amax(dim=(0, 2)) / 448 for x in (k, v)))  # [Hkv]
    block_q = max(64 // gqa_padded(q_heads, kv_heads), 1)
    work = prefill_work(cu, block_q, DEVICE)
    scale = dim**-0.5
    cache_shape = (2 * tokens, kv_heads, dim)
    plain = [torch.zeros(cache_shape, dtype=dtype, device=DEVICE) for _ in "kv"]
    fp8 = [torch.zeros(cache_shape, dtype=KV_FP8_DTYPE, device=DEVICE) for _ in "kv"]
    rows_fp8 = [torch.empty(k.shape, dtype=KV_FP8_DTYPE, device=DEVICE) for _ in "kv"]
    rows_wide = [torch.empty(k.shape, dtype=dtype, device=DEVICE) for _ in "kv"]

    def attend(
        kv: list[torch.Tensor],
        kv_scales: KvScales | None,
        fp8_queries: bool = False,
        fp8_probabilities: bool = False,
    ) -> torch.Tensor:
        return ragged_causal_prefill(q, kv[0], kv[1], cu, scale, kv_scales, work=work,
                                     block_q=block_q, fp8_queries=fp8_queries,
                                     fp8_probabilities=fp8_probabilities)  # fmt: skip

    def model_dtype() -> torch.Tensor:
        write_kv_triton(plain[0], plain[1], slots, k, v)
        return attend([k, v], None)

    def fp8_rows(
        rows: list[torch.Tensor], fp8_queries: bool, fp8_probabilities: bool
    ) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            write_kv_triton(fp8[0], fp8[1], slots, k, v, scales, (rows[0], rows[1]))
            return attend(rows, scales, fp8_queries, fp8_probabilities)

        return run

    k8, v8 = quantize_kv(k, scales.k_inv), quantize_kv(v, scales.v_inv)
    shape = f"{name}: {len(lengths)} x {lengths[0]} tokens, heads {q_heads}/{kv_heads}/{dim}"
    bytes_plain = tokens * (q_heads * 2 + kv_heads * 2 * 2) * dim * q.element_size()
    breakdown = ("_kv_write_kernel", "_prefill_kernel", "elementwise", "_quantize_heads_kernel")
    cases = [
        Case(
            kernel=f"KV write + prefill, {str(dtype).removeprefix('torch.')} KV",
            shape=shape,
            triton=model_dtype,
            torch=lambda: causal_prefill(q, k, v, cu, scale),
            bytes=bytes_plain,
            check=close_with_error({"rtol": 2e-2, "atol": 2e-2}),
            breakdown=breakdown,
            torch_key=shape + " model dtype",
        )
    ]
    for label, rows, queries, probabilities in (
        ("rows FP8, widened by the prefill", rows_fp8, False, False),
        ("rows widened by the write", rows_wide, False, False),
        ("rows widened by the write, FP8 queries", rows_wide, True, False),
        ("rows FP8, FP8 queries and probabilities", rows_fp8, True, True),
    ):
        flags = {"fp8_queries": queries, "fp8_probabilities": probabilities}
        cases.append(
            Case(
                kernel=f"KV write + prefill, FP8 KV, {label}",
                shape=shape,
                triton=fp8_rows(rows, queries, probabilities),
                torch=lambda flags=flags: causal_prefill(q, k8, v8, cu, scale, scales, **flags),
                bytes=bytes_plain,
                check=close_with_error({"rtol": 2e-2, "atol": 2e-2}),
                breakdown=breakdown,
                torch_key=shape
                + (" fp8 queries" if queries else " fp8")
                + (" probabilities" if probabilities else ""),
            )
        )
    return cases


def fp8_prefill(args: argparse.Namespace) -> list[Case]:
    if args.smoke:
        return fp8_prefill_cases("smoke", [40, 9], (4, 2, 32))
    heads = QWEN3["1.7b"]
    cases = fp8_prefill_cases("W2 ctx 5000", [5000], heads)
    return cases + fp8_prefill_cases("W4, 3 prompts", [2451] * 3, heads)


def kv(args: argparse.Namespace) -> list[Case]:
    """The KV write of one layer: K and V rows (strided views of a fused qkv output) to their
    slots, against two `index_copy_` calls."""
    from widebeam.kernels.kv import kv_write, triton_kv_write

    q_heads, kv_heads, dim = (4, 2, 32) if args.smoke else QWEN3["1.7b"]
    cases = []
    for rows in (7,) if args.smoke else (256, 5000, 6144):  # W2 step, W1 step, W3 n = 512
        width = kv_heads * dim
        qkv = torch.randn(rows, (q_heads + 2 * kv_heads) * dim, device=DEVICE).bfloat16()
        k = qkv[:, q_heads * dim : q_heads * dim + width].view(rows, kv_heads, dim)
        v = qkv[:, q_heads * dim + width :].view(rows, kv_heads, dim)
        slots = torch.randperm(4 * rows, device=DEVICE)[:rows]
        caches = [torch.zeros(2, 4 * rows, kv_heads, dim, device=DEVICE).bfloat16() for _ in "ab"]

        def fused(c: torch.Tensor = caches[0], k=k, v=v, s=slots) -> torch.Tensor:
            triton_kv_write.write_kv_triton(c[0], c[1], s, k, v)
            return c

        def ref(c: torch.Tensor = caches[1], k=k, v=v, s=slots) -> torch.Tensor:
            kv_write.write_kv_ref(c[0], c[1], s, k, v)
            return c

        cases.append(
            Case(
                kernel="kv_write",
                shape=f"{rows} rows x {kv_heads} x {dim} bf16",
                triton=fused,
                torch=ref,
                bytes=2 * 2 * k.numel() * 2 + rows * 8,
                check=close({"rtol": 0, "atol": 0}),
            )
        )
    return cases


# ----------------------------------------------------------------------------- prefix tiles


def prefix_tiles(args: argparse.Namespace) -> list[dict[str, int | None]]:
    """The prefix kernel's sweep: rows per work item x (BLOCK_N:warps:stages[:registers]),
    'auto' = default."""

    def auto(text: str) -> int | None:
        return None if text == "auto" else int(text)

    tiles = []
    for rows in args.prefix_rows.split(","):
        for tile in args.prefix_tiles.split(","):
            block_n, warps, stages, registers = [*tile.split(":"), "auto", "auto", "auto"][:4]
            tiles.append(
                {
                    "block_rows": auto(rows),
                    "block_n": auto(block_n),
                    "prefix_warps": auto(warps),
                    "prefix_stages": auto(stages),
                    "prefix_max_registers": auto(registers),
                }
            )
    return tiles


# `--prefix-dots` over an FP8 cache: cascade_decode_packed's options for each name ("fp8": Q K^T
# on FP8 tensor cores over quantized queries, P V in the dtype the kernels' rule picks; "fp8pv":
# P V on them too, over FP8 probabilities)
PREFIX_DOTS: dict[str, dict[str, object]] = {
    "auto": {},
    "bf16": {"fp8_dot": torch.bfloat16},
    "fp16": {"fp8_dot": torch.float16},
    "fp8": {"fp8_queries": True},
    "fp8pv": {"fp8_queries": True, "fp8_probabilities": True},
}


def prefix_dots(args: argparse.Namespace) -> list[str]:
    """The FP8 cache's dot dtypes to sweep (`--prefix-dots`; a model-dtype cache has none)."""
    dots = args.prefix_dots.split(",")
    unknown = set(dots) - set(PREFIX_DOTS)
    if unknown:
        raise SystemExit(f"--prefix-dots: {sorted(unknown)} not in {list(PREFIX_DOTS)}")
    return dots


def prefix_cases(
    name: str, groups: list[tuple[int, int, int]], heads: tuple[int, int, int], args
) -> list[Case]:
    """Cascade decode with the prefix kernel's tiles swept, over a cache in the model dtype and
    in FP8; the prefix kernel's own time in the breakdown, its TFLOP/s over the prompt dots."""
    from widebeam.kernels.attention.torch_ref import cascade_decode
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed
    from widebeam.kernels.attention.triton_common import (
        gqa_padded,
        multiprocessors,
        prefix_block_rows,
        prefix_tile,
    )
    from widebeam.kernels.kv.fp8_kv import KvScales, quantize_kv

    q, k_cache, v_cache, batch = decode_inputs(groups, heads, seed=len(groups))
    rows, (q_heads, kv_heads, dim) = q.shape[0], heads
    scale = dim**-0.5
    scales = KvScales.of(
        *(x.float().abs().amax(dim=(0, 2)) / 448 for x in (k_cache, v_cache))  # [Hkv] fp32
    )
    k8, v8 = quantize_kv(k_cache, scales.k_inv), quantize_kv(v_cache, scales.v_inv)
    flops = 4.0 * sum(r * p for r, p, _ in groups) * q_heads * dim  # QK^T and PV
    widest = max(r for r, _, _ in groups)
    shape = f"{name}: R {rows}, G {len(groups)}, P {groups[0][1]}, s {groups[0][2]}"
    cases = []
    model_dtype = str(q.dtype).removeprefix("torch.")
    arms = [(model_dtype, (k_cache, v_cache), None, "auto")]
    arms += [("fp8", (k8, v8), scales, dots) for dots in prefix_dots(args)]
    for kv_name, caches, kv_scales, dots in arms:
        rounded = bool(PREFIX_DOTS[dots].get("fp8_queries"))  # the reference rounds them too
        probabilities = bool(PREFIX_DOTS[dots].get("fp8_probabilities"))
        for tile in prefix_tiles(args):
            # auto: the engine's rule (FP8 queries take wider items where the batch fills the GPU)
            block_rows = tile["block_rows"] or prefix_block_rows(
                q_heads, kv_heads, rows, widest, rounded, multiprocessors(q.device)
            )
            packed = pack(batch, rows, heads, block_rows=block_rows)
            opts = {k: v for k, v in tile.items() if k != "block_rows" and v is not None}
            opts |= PREFIX_DOTS[dots]
            m = block_rows * gqa_padded(q_heads, kv_heads)
            chosen = prefix_tile(m, caches[0].dtype)
            registers = tile["prefix_max_registers"] or chosen.max_registers
            label = (
                f"M {m}, N {tile['block_n'] or f'auto {chosen.block_n}'}, "
                f"warps {tile['prefix_warps'] or f'auto {chosen.warps or 4}'}, "
                f"stages {tile['prefix_stages'] or f'auto {chosen.stages or 3}'}, "
                f"splits {packed.num_splits}"
                + (f", registers {registers}" if registers else "")
                + (f", dots {dots}" if kv_scales is not None else "")
            )

            def run(packed=packed, opts=opts, caches=caches, kv_scales=kv_scales) -> torch.Tensor:
                return cascade_decode_packed(q, *caches, packed, scale, kv_scales, **opts)

            cases.append(
                Case(
                    kernel=f"prefix {kv_name} KV ({label})",
                    shape=shape,
                    triton=run,
                    torch=partial(
                        cascade_decode,
                        q,
                        *caches,
                        batch,
                        scale,
                        kv_scales,
                        fp8_queries=rounded,
                        fp8_probabilities=probabilities,
                    ),
                    flops=flops,
                    check=close_with_error({"rtol": 2e-2, "atol": 2e-2}),
                    breakdown=("prefix_kernel", "_quantize_heads_kernel")
                    if rounded
                    else ("prefix_kernel",),
                    torch_key=f"{shape} {kv_name}{' fp8 queries' if rounded else ''}"
                    + (" probabilities" if probabilities else ""),
                )
            )
    return cases


PREFIX_SHAPES = {  # name: (rows, prompt, suffix) per request, Qwen3-1.7B's heads (0.6B's too)
    "W3 n=50": [(50, 301, 2)] * 64,
    "W3 n=1000": [(1000, 301, 2)] * 8,
    "W4 n=50": [(50, 2451, 2)] * 32,
    "W4 n=1000": [(1000, 2451, 2)] * 4,
    "W2 ctx 5000": [(256, 5000, 2)],
    "W1": [(5000, 64, 2)],
}


def prefix(args: argparse.Namespace) -> list[Case]:
    if args.smoke:
        return prefix_cases("smoke", [(40, 20, 3), (9, 5, 11)], (4, 2, 32), args)
    cases = []
    for name in args.prefix_shapes.split(","):
        groups = PREFIX_SHAPES.get(name) or custom_shape(name)
        cases += prefix_cases(name, groups, QWEN3["1.7b"], args)
    return cases


def custom_shape(name: str) -> list[tuple[int, int, int]]:
    """REQUESTSxROWSxPROMPT (e.g. 4x1000x2451): that many requests of that many rows each over
    prompts of that length, two suffix tokens each, as PREFIX_SHAPES' rows are."""
    parts = name.split("x")
    if len(parts) != 3 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise SystemExit(
            f"--prefix-shapes: {name!r} is neither one of {list(PREFIX_SHAPES)} nor "
            "REQUESTSxROWSxPROMPT with positive integers (e.g. 4x1000x2451)"
        )
    requests, rows, prompt = map(int, parts)
    return [(rows, prompt, 2)] * requests


GROUPS: dict[str, Callable[[argparse.Namespace], list[Case]]] = {
    "attention": attention,
    "padding": padding,
    "tree": tree,
    "prefill": prefill,
    "logits": logits,
    "layers": layers,
    "kv": kv,
    "fp8kv": fp8_kv,
    "prefix": prefix,
    "fp8prefill": fp8_prefill,
}


# ----------------------------------------------------------------------------- timing


class Timer:
    """Per-call device times: warm-up, then `reps` calls each between its own CUDA events while a
    sleep kernel holds the queue, so the host's launch overhead is not timed."""

    def __init__(self, reps: int, warmup: int, flush: bool) -> None:
        self.reps, self.warmup = reps, warmup
        cuda = DEVICE.type == "cuda"
        self.scrub = torch.empty(512 << 20, dtype=torch.uint8, device=DEVICE) if flush else None
        self.cycles_per_ms = self._calibrate() if cuda else 0.0

    @staticmethod
    def _calibrate() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1000)
        start.record()
        torch.cuda._sleep(10_000_000)
        end.record()
        torch.cuda.synchronize()
        return 10_000_000 / start.elapsed_time(end)

    def _flush(self) -> None:
        if self.scrub is not None:
            self.scrub.zero_()

    def times_us(self, fn: Callable[[], object]) -> list[float]:
        for _ in range(self.warmup):
            fn()
        if DEVICE.type != "cuda":  # smoke run: host timers
            out = []
            for _ in range(self.reps):
                t0 = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t0) * 1e6)
            return out
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        self._flush()
        fn()
        host_s = time.perf_counter() - t0  # enqueue cost of one call (+ flush)
        torch.cuda.synchronize()
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(self.reps)
        ]
        hold_ms = min(1000.0, 1.5 * host_s * 1000 * self.reps + 1.0)
        torch.cuda._sleep(int(hold_ms * self.cycles_per_ms))
        for start, end in events:
            self._flush()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) * 1000 for start, end in events]

    def kernel_us(self, fn: Callable[[], object], names: tuple[str, ...]) -> dict[str, float]:
        """Mean device time per call of each named kernel (torch profiler)."""
        if DEVICE.type != "cuda" or not names:
            return {}
        from torch.profiler import ProfilerActivity, profile

        calls = min(self.reps, 20)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                self._flush()
                fn()
            torch.cuda.synchronize()
        found: dict[str, float] = {}
        for evt in prof.key_averages():
            for name in names:
                if name in evt.key:
                    total = getattr(evt, "device_time_total", None)
                    total = evt.cuda_time_total if total is None else total
                    found[name] = found.get(name, 0.0) + total / calls
        return found


def add_case_args(parser: argparse.ArgumentParser) -> None:
    """The options that choose the cases (kernel_resources.py builds the same cases)."""
    parser.add_argument(
        "--only", default=",".join(GROUPS), help="comma list of " + ", ".join(GROUPS)
    )
    sweep = "suffix-merge kernel sweep: comma list, 'auto' = default"
    parser.add_argument("--rows-per-program", default="1,auto", help=f"{sweep} (BLOCK_R)")
    parser.add_argument("--suffix-warps", default="auto", help=f"{sweep} (num_warps)")
    parser.add_argument("--block-s", default="auto", help=f"{sweep} (BLOCK_S)")
    parser.add_argument("--suffix-stages", default="auto", help=f"{sweep} (num_stages)")
    shared = "shared-suffix kernel sweep (group tree): comma list, 'auto' = default"
    parser.add_argument("--shared-block-n", default="auto", help=f"{shared} (BLOCK_N)")
    parser.add_argument("--shared-programs", default="auto", help=f"{shared} (programs per SM)")
    parser.add_argument("--shared-warps", default="auto", help=f"{shared} (num_warps)")
    parser.add_argument(
        "--shared-registers",
        default="auto",
        help=f"{shared} (registers per thread, maxnreg; 0 = the compiler's)",
    )
    parser.add_argument(
        "--tree-split", default="8:8", help="split rules private_min:align (group tree), comma list"
    )
    parser.add_argument(
        "--tree-rows", default="auto", help=f"{shared} (rows per item, a power of two)"
    )
    prefix_sweep = "prefix kernel sweep (group prefix): comma list, 'auto' = default"
    parser.add_argument(
        "--prefix-rows", default="auto,64", help=f"{prefix_sweep} (rows per work item)"
    )
    parser.add_argument(
        "--prefix-tiles",
        default="64:auto:auto,64:8:3,128:8:3,32:4:3,64:4:4,128:8:2,64:8:4",
        help=f"{prefix_sweep} (BLOCK_N:warps:stages[:registers per thread])",
    )
    parser.add_argument(
        "--prefix-dots",
        default="auto",
        help=f"{prefix_sweep} over the FP8 cache: the dots' dtype, of auto (the kernels' rule), "
        "bf16, fp16, fp8 (Q K^T over quantized queries, P V by the rule)",
    )
    parser.add_argument(
        "--prefix-shapes",
        default="W3 n=50,W3 n=1000,W4 n=50,W4 n=1000,W2 ctx 5000,W1",
        help="the prefix group's shapes, comma list: PREFIX_SHAPES' names or "
        "REQUESTSxROWSxPROMPT (e.g. 4x1000x2451)",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_case_args(parser)
    parser.add_argument("--reps", type=int, default=50, help="timed calls per case (median)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no-flush", action="store_true", help="keep L2 warm between calls")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch references")
    parser.add_argument("--tag", default="", help="suffix of the result JSON's name")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (CPU: interpreter)")
    args = parser.parse_args()
    if DEVICE.type != "cuda" and not args.smoke:
        parser.error("needs a CUDA device (or --smoke for a CPU check of the script)")
    if SMOKE:
        args.reps, args.warmup = min(args.reps, 2), min(args.warmup, 1)
    unknown = set(args.only.split(",")) - set(GROUPS)
    if unknown:
        parser.error(f"unknown groups {sorted(unknown)}; choose from {', '.join(GROUPS)}")
    timer = Timer(args.reps, args.warmup, flush=not args.no_flush and not args.smoke)
    results, table = [], []
    for group in args.only.split(","):
        torch_us: dict[str, tuple[float | None, object]] = {}
        for case in GROUPS[group](args):
            row = measure(case, timer, torch_us, args.no_torch)
            print(" | ".join(map(str, table_row(row))), flush=True)
            results.append(row)
            table.append(table_row(row))
        torch_us.clear()
        if DEVICE.type == "cuda":
            torch.cuda.empty_cache()
    env = environment() | {
        "reps": args.reps,
        "flush_l2": timer.scrub is not None,
        "smoke": args.smoke,
    }
    write_json("kernels" + args.tag, {"env": env, "rows": results})
    print(f"\nKernel micro-benchmarks (median of {args.reps} calls), {env}")
    headers = ["kernel", "shape", "triton us", "torch us", "speed-up", "GB/s", "of HBM", "check"]
    print(markdown_table([*headers, "per kernel"], table))


def measure(case: Case, timer: Timer, torch_us: dict, no_torch: bool) -> dict[str, object]:
    tri_times = timer.times_us(case.triton)
    tri_out = case.triton()
    ref_us, ref_out = None, None
    if case.torch is not None and not no_torch:
        key = case.torch_key or case.kernel + case.shape
        if key not in torch_us:
            ref_times = timer.times_us(case.torch)
            torch_us[key] = (statistics.median(ref_times), case.torch())
        ref_us, ref_out = torch_us[key]
    tri_us = statistics.median(tri_times)
    row: dict[str, object] = {
        "kernel": case.kernel,
        "shape": case.shape,
        "triton_us": tri_us,
        "triton_us_p10_p90": [quantile(tri_times, 0.1), quantile(tri_times, 0.9)],
        "torch_us": ref_us,
        "speedup": ref_us / tri_us if ref_us else None,
        "bytes": case.bytes,
        "gbs": case.bytes / tri_us / 1e3 if case.bytes else None,
        "tflops": case.flops / tri_us / 1e6 if case.flops else None,
        "check": case.check(tri_out, ref_out) if case.check and ref_out is not None else "-",
    }
    per_kernel = timer.kernel_us(case.triton, case.breakdown)
    row["kernels"] = {
        name: {
            "us": us,
            "gbs": case.kernel_bytes[name] / us / 1e3 if name in case.kernel_bytes else None,
        }
        for name, us in per_kernel.items()
    }
    return row


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def table_row(row: dict) -> list[object]:
    def num(v: object, fmt: str = "{:.1f}") -> str:
        return "-" if v is None else fmt.format(v)

    per = "; ".join(
        f"{name.strip('_')} {k['us']:.1f} us" + (f" {k['gbs']:.0f} GB/s" if k["gbs"] else "")
        for name, k in row["kernels"].items()
    )
    if row["tflops"]:
        per = (per + "; " if per else "") + f"{row['tflops']:.0f} TFLOP/s"
    return [
        row["kernel"],
        row["shape"],
        num(row["triton_us"]),
        num(row["torch_us"]),
        num(row["speedup"], "{:.1f}x"),
        num(row["gbs"], "{:.0f}"),
        num(row["gbs"] and row["gbs"] / HBM_GBS * 100, "{:.0f}%"),
        row["check"],
        per or "-",
    ]


if __name__ == "__main__":
    main()
