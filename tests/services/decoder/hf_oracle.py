"""transformers `generate` as the oracle for engine results (tests only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from transformers import GenerationConfig

from widebeam.services.decoder.requests.spec import GenerationRequest


class OracleBeam(NamedTuple):
    output_ids: list[int]
    score: float | None


def trie_prefix_fn(
    catalog: list[tuple[str, tuple[int, ...]]],
    bases: list[int],
    begin: int | None,
    end: int | None,
    prompt: tuple[int, ...],
    eos: list[int],
) -> Callable[[int, torch.Tensor], list[int]]:
    """An independent dict-of-dicts trie walk: children of the current node; after a complete
    SID (or off the trie) only the first EOS id."""
    root: dict = {}
    for _, sid in catalog:
        node = root
        path = [begin] if begin is not None else []
        path += [bases[level] + code for level, code in enumerate(sid)]
        path += [end] if end is not None else []
        for token in path:
            node = node.setdefault(token, {})
    start = root[begin] if begin is not None and prompt[-1] == begin else root
    fallback = eos[:1] or [0]

    def allowed(batch_id: int, input_ids: torch.Tensor) -> list[int]:
        node = start
        for token in input_ids[len(prompt) :].tolist():
            node = node.get(token) if node else None
            if node is None:
                return fallback
        return sorted(node) if node else fallback

    return allowed


def hf_generate(
    model: torch.nn.Module,
    req: GenerationRequest,
    eos: list[int],
    prefix_fn: Callable[[int, torch.Tensor], list[int]] | None,
) -> list[OracleBeam]:
    config = GenerationConfig(
        num_beams=req.beam_width,
        num_return_sequences=req.n,
        max_new_tokens=req.max_new_tokens,
        min_new_tokens=req.min_new_tokens,
        length_penalty=req.length_penalty,
        early_stopping=req.early_stopping,
        eos_token_id=eos or None,
        pad_token_id=0,
        do_sample=False,
        return_dict_in_generate=True,
        output_scores=True,
    )
    prompt = torch.tensor([req.input_ids])
    with torch.no_grad():
        out = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            generation_config=config,
            prefix_allowed_tokens_fn=prefix_fn,
        )
    beams = []
    plen = prompt.shape[1]
    for i in range(out.sequences.shape[0]):
        if req.beam_width > 1:
            length = int((out.beam_indices[i] >= 0).sum())
            score = float(out.sequences_scores[i])
        else:
            generated = out.sequences[i, plen:].tolist()
            length = len(generated)
            for j, token in enumerate(generated):
                if token in eos:
                    length = j + 1
                    break
            score = None
        beams.append(OracleBeam(out.sequences[i, plen : plen + length].tolist(), score))
    return beams
