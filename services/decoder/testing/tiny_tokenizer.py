"""The tiny models' tokenizer: a WordLevel `tokenizer.json` with Qwen-style special tokens and
`<s_a_N>`-style SID tokens, loadable by `tokenizers` and by transformers' AutoTokenizer."""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

SPECIAL_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
SID_BEGIN = "<|sid_begin|>"
SID_END = "<|sid_end|>"


def sid_token(level: int, code: int) -> str:
    """Name of SID code ``code`` at ``level`` (0-based): level 0 -> ``<s_a_{code}>``, 1 -> b, ..."""
    return f"<s_{string.ascii_lowercase[level]}_{code}>"


def tiny_vocab(base_vocab: int, sid_levels: Sequence[int] | None, sid_begin_end: bool) -> list[str]:
    """Token strings in id order: base ``<t_i>``, Qwen-style specials, SID codes, SID brackets."""
    tokens = [f"<t_{i}>" for i in range(base_vocab)]
    tokens += SPECIAL_TOKENS
    if sid_levels:
        if len(sid_levels) > len(string.ascii_lowercase):
            raise ValueError(f"at most 26 SID levels, got {len(sid_levels)}")
        for level, size in enumerate(sid_levels):
            tokens += [sid_token(level, c) for c in range(size)]
        if sid_begin_end:
            tokens += [SID_BEGIN, SID_END]
    return tokens


def write_tokenizer(out: Path, tokens: list[str]) -> None:
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    # Every token is "<...>", so text splits on angle-bracket groups; whitespace is dropped.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(r"<[^<>]*>"), "isolated")]
    )
    tok.decoder = decoders.Fuse()  # decode concatenates, as the tokens are self-delimiting
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    sid = [t for t in tokens if t.startswith("<s_") or t in (SID_BEGIN, SID_END)]
    if sid:
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in sid])
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
        "model_max_length": 1_000_000,
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
