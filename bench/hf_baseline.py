"""transformers `generate(num_beams=k)` on the same weights and inputs, timed the same way."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch


def load_hf(path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
    model.generation_config.eos_token_id = None  # full length, as in our runs
    return model


def hf_beam_ms(
    model: torch.nn.Module,
    prompt: list[int],
    beams: int,
    new_tokens: int,
    prefix_fn: Callable[[int, torch.Tensor], list[int]] | None = None,
    reps: int = 1,
) -> float:
    ids = torch.tensor([prompt], device="cuda")
    times = []
    for _ in range(reps + 1):  # first call warms up
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                num_beams=beams,
                num_return_sequences=beams,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
                prefix_allowed_tokens_fn=prefix_fn,
            )
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1000)
    return min(times[1:])
