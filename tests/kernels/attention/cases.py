"""Random decode batches for the kernel tests: ragged groups, padding rows, poisoned KV."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from widebeam.kernels.attention.metadata import DecodeBatch, DecodeGroup


@dataclass(frozen=True)
class DecodeCase:
    q: torch.Tensor  # [R, Hq, D]
    k_cache: torch.Tensor  # [slots, Hkv, D], NaN in every slot no group references
    v_cache: torch.Tensor
    batch: DecodeBatch
    real_rows: torch.Tensor  # [R] bool, False = padding row


def decode_case(
    groups: list[tuple[int, int, int]],  # (rows, prompt_len, suffix_len) per group
    *,
    q_heads: int,
    kv_heads: int,
    dim: int,
    dtype: torch.dtype,
    device: torch.device,
    seed: int,
    pad_rows: int = 0,  # padding rows before each group and at the end
    page_size: int = 1,  # > 1: prompts start on page boundaries, as the engine lays them out
) -> DecodeCase:
    gen = torch.Generator().manual_seed(seed)
    need = [(-(-p // page_size) - (-r * s // page_size)) * page_size for r, p, s in groups]
    num_slots = 2 * sum(need) + 8 * page_size
    pages = torch.randperm(num_slots // page_size, generator=gen)
    free = (pages[:, None] * page_size + torch.arange(page_size)).reshape(-1)
    if page_size == 1:
        free = torch.randperm(num_slots, generator=gen)  # prompts scattered anywhere
    made, row, used = [], 0, [torch.empty(0, dtype=torch.int64)]
    for num_rows, prompt_len, suffix_len in groups:
        row += pad_rows
        prompt = free[:prompt_len]
        free = free[-(-prompt_len // page_size) * page_size :]
        suffix = free[: num_rows * suffix_len].reshape(num_rows, suffix_len)
        free = free[-(-num_rows * suffix_len // page_size) * page_size :]  # next page
        made.append(DecodeGroup(row, num_rows, prompt.to(device), suffix.to(device)))
        used += [prompt, suffix.reshape(-1)]
        row += num_rows
    shapes = (q_heads, kv_heads, dim, dtype, device)
    return _with_data(made, row + pad_rows, num_slots, torch.cat(used), shapes, gen)


def _with_data(
    made: list[DecodeGroup],
    rows: int,
    num_slots: int,
    used: torch.Tensor,  # [*] int64 slots some group references
    shapes: tuple[int, int, int, torch.dtype, torch.device],  # q heads, kv heads, dim, ...
    gen: torch.Generator,
) -> DecodeCase:
    """Random K, V (NaN in every slot outside `used`) and q for the groups' batch."""
    q_heads, kv_heads, dim, dtype, device = shapes
    real = torch.zeros(rows, dtype=torch.bool)
    for g in made:
        real[g.row_start : g.row_start + g.num_rows] = True

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dtype).to(device)

    k_cache, v_cache = rand(num_slots, kv_heads, dim), rand(num_slots, kv_heads, dim)
    unused = torch.ones(num_slots, dtype=torch.bool)
    unused[used] = False
    k_cache[unused.to(device)] = float("nan")  # a kernel reading outside its slots shows NaN
    v_cache[unused.to(device)] = float("nan")
    q = rand(rows, q_heads, dim)
    return DecodeCase(q, k_cache, v_cache, DecodeBatch(tuple(made)), real.to(device))


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    """fp32: the kernels accumulate exactly like the reference up to summation order. bf16/fp16:
    P is rounded to V's dtype before the PV product and the output is rounded once."""
    if dtype == torch.float32:
        return {"rtol": 1e-5, "atol": 2e-5}
    return {"rtol": 2e-2, "atol": 2e-2}


def uniform_batch(rows: list[int], prompt: int, suffix: int) -> DecodeBatch:
    """Groups back to back with `rows` rows each, equal prompt and suffix lengths (slot ids
    only: for bucket checks, not for attention over a cache)."""
    groups, start = [], 0
    for i, n in enumerate(rows):
        prompt_slots = torch.arange(prompt) + 1000 * i
        groups.append(DecodeGroup(start, n, prompt_slots, torch.zeros(n, suffix, dtype=torch.long)))
        start += n
    return DecodeBatch(tuple(groups))


def reparented(batch: DecodeBatch) -> DecodeBatch:
    """The same groups with each group's suffix rows in reverse order (as a beam step may
    re-parent them): the same shapes, other slot tables."""
    return DecodeBatch(
        tuple(
            DecodeGroup(g.row_start, g.num_rows, g.prompt_slots, g.suffix_slots.flip(0))
            for g in batch.groups
        )
    )


def beam_tree_case(
    groups: list[tuple[int, int, int]],  # (rows, prompt_len, steps) per group
    *,
    q_heads: int,
    kv_heads: int,
    dim: int,
    dtype: torch.dtype,
    device: torch.device,
    seed: int,
    pad_rows: int = 0,
) -> DecodeCase:
    """Like `decode_case`, but each group's suffixes come from a beam search: at every step each
    row takes a random earlier row as parent (a few parents get most children, as beams do)
    and appends its own new slot, so rows share their suffixes up to their common ancestor."""
    gen = torch.Generator().manual_seed(seed)
    made, row, next_slot, used = [], 0, 0, []
    for num_rows, prompt_len, steps in groups:
        row += pad_rows
        prompt = torch.arange(next_slot, next_slot + prompt_len)
        next_slot += prompt_len
        table = torch.empty((num_rows, 0), dtype=torch.int64)
        for _ in range(steps):
            weights = torch.rand(num_rows, generator=gen) ** 4  # skewed: few parents dominate
            parents = torch.multinomial(weights + 1e-6, num_rows, True, generator=gen)
            fresh = torch.arange(next_slot, next_slot + num_rows)[:, None]
            next_slot += num_rows
            table = torch.cat([table[parents], fresh], dim=1)
        made.append(DecodeGroup(row, num_rows, prompt.to(device), table.to(device)))
        used += [prompt, table.reshape(-1)]
        row += num_rows
    num_slots = next_slot + 8
    order = torch.randperm(num_slots, generator=gen)  # slots scattered over the cache
    made = [
        DecodeGroup(g.row_start, g.num_rows, order[g.prompt_slots.cpu()].to(device),
                    order[g.suffix_slots.cpu()].to(device))
        for g in made
    ]  # fmt: skip
    used_slots = order[torch.cat([u.reshape(-1) for u in used])]
    shapes = (q_heads, kv_heads, dim, dtype, device)
    return _with_data(made, row + pad_rows, num_slots, used_slots, shapes, gen)
