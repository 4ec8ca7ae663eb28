"""SID layout: where each semantic-ID level's codes live in the model vocabulary.

Level ``l`` code ``c`` is token ``levels[l].base + c``. A layout may also name the
``<|sid_begin|>`` / ``<|sid_end|>`` tokens that bracket a SID in generated text.

Text form (``SidLayout.parse`` / ``SidLayout.to_spec``)::

    BASE:SIZE,BASE:SIZE,...[;begin=ID][;end=ID]

e.g. ``"1000:256,1256:256,1512:256;begin=998;end=999"``. Whitespace is ignored.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SID_TOKEN_RE = re.compile(r"^<s_([a-z])_([0-9]+)>$")
_BEGIN_TOKEN = "<|sid_begin|>"
_END_TOKEN = "<|sid_end|>"


@dataclass(frozen=True)
class SidLevel:
    """One SID level: codes ``0..size-1`` map to token ids ``base..base+size-1``."""

    base: int
    size: int

    @property
    def end(self) -> int:
        """One past the last token id of this level."""
        return self.base + self.size


@dataclass(frozen=True)
class SidLayout:
    levels: tuple[SidLevel, ...]
    begin_token_id: int | None = None
    end_token_id: int | None = None

    def __post_init__(self) -> None:
        # Normalise lists to tuples so equal layouts hash and compare equal.
        object.__setattr__(self, "levels", tuple(self.levels))
        if not self.levels:
            raise ValueError("SID layout needs at least one level")
        for i, lv in enumerate(self.levels):
            if lv.base < 0:
                raise ValueError(f"SID level {i}: negative base {lv.base}")
            if lv.size <= 0:
                raise ValueError(f"SID level {i}: size must be positive, got {lv.size}")
        ranges = sorted((lv.base, lv.end, i) for i, lv in enumerate(self.levels))
        for (_, end_a, ia), (base_b, _, ib) in itertools.pairwise(ranges):
            if base_b < end_a:
                raise ValueError(f"SID levels {ia} and {ib} have overlapping token ranges")
        for name, tok in (("begin", self.begin_token_id), ("end", self.end_token_id)):
            if tok is None:
                continue
            if tok < 0:
                raise ValueError(f"SID {name} token id is negative: {tok}")
            hit = self._level_of(tok)
            if hit is not None:
                raise ValueError(f"SID {name} token id {tok} lies inside level {hit}'s range")
        if self.begin_token_id is not None and self.begin_token_id == self.end_token_id:
            raise ValueError("SID begin and end token ids must differ")

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def parse(cls, spec: str) -> SidLayout:
        """Parse ``"BASE:SIZE,...[;begin=ID][;end=ID]"`` (see module docstring)."""
        parts = [p.strip() for p in spec.replace(" ", "").split(";")]
        if not parts[0]:
            raise ValueError(f"SID layout spec {spec!r}: no levels before ';'")
        levels = []
        for item in parts[0].split(","):
            fields = item.split(":")
            if len(fields) != 2:
                raise ValueError(f"SID layout spec {spec!r}: level {item!r} is not BASE:SIZE")
            base, size = (_parse_int(f, spec) for f in fields)
            levels.append(SidLevel(base, size))
        extra: dict[str, int] = {}
        for opt in parts[1:]:
            key, sep, value = opt.partition("=")
            if not sep or key not in ("begin", "end"):
                raise ValueError(
                    f"SID layout spec {spec!r}: option {opt!r} is not begin=ID or end=ID"
                )
            if key in extra:
                raise ValueError(f"SID layout spec {spec!r}: {key} given twice")
            extra[key] = _parse_int(value, spec)
        return cls(tuple(levels), extra.get("begin"), extra.get("end"))

    @classmethod
    def from_tokenizer(cls, model_dir: str | os.PathLike[str]) -> SidLayout | None:
        """Infer the layout from ``<s_a_N>``-style tokens in ``tokenizer.json``.

        ``model_dir`` is a model folder or the tokenizer.json path itself. Returns None when
        the vocabulary has no SID tokens.
        """
        path = Path(model_dir)
        if path.is_dir():
            path = path / "tokenizer.json"
        with path.open(encoding="utf-8") as f:
            data = json.load(f)
        vocab = _token_ids(data)
        codes: dict[int, dict[int, int]] = {}  # level -> code -> token id
        for text, tok in vocab.items():
            m = _SID_TOKEN_RE.match(text)
            if m:
                codes.setdefault(ord(m.group(1)) - ord("a"), {})[int(m.group(2))] = tok
        if not codes:
            return None
        if sorted(codes) != list(range(len(codes))):
            missing = sorted(set(range(max(codes) + 1)) - set(codes))
            raise ValueError(f"tokenizer SID levels are not contiguous: missing level(s) {missing}")
        levels = []
        for lvl in range(len(codes)):
            by_code = codes[lvl]
            base = by_code.get(0)
            size = len(by_code)
            ok = base is not None and all(by_code.get(c) == base + c for c in range(size))
            if not ok:
                letter = chr(ord("a") + lvl)
                raise ValueError(
                    f"tokenizer SID level {lvl} (<s_{letter}_N>) is not contiguous: codes must be "
                    f"0..{size - 1} with consecutive token ids"
                )
            levels.append(SidLevel(base, size))  # type: ignore[arg-type]
        return cls(tuple(levels), vocab.get(_BEGIN_TOKEN), vocab.get(_END_TOKEN))

    # -- queries ------------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Number of SID levels (L)."""
        return len(self.levels)

    def path_length(self, include_begin: bool) -> int:
        """Tokens in a full SID path: [begin] + L codes + [end]."""
        begin = 1 if (self.begin_token_id is not None and include_begin) else 0
        end = 1 if self.end_token_id is not None else 0
        return begin + self.depth + end

    def code_to_token(self, level: int, code: int) -> int:
        if not 0 <= level < self.depth:
            raise ValueError(f"SID level {level} out of range 0..{self.depth - 1}")
        size = self.levels[level].size
        if not 0 <= code < size:
            raise ValueError(f"SID code {code} out of range 0..{size - 1} at level {level}")
        return self.levels[level].base + code

    def token_to_code(self, token: int) -> tuple[int, int] | None:
        """(level, code) of a SID token, or None for any other token."""
        lvl = self._level_of(token)
        return None if lvl is None else (lvl, token - self.levels[lvl].base)

    def validate_against_vocab(self, vocab_size: int) -> None:
        """Raise ValueError unless every layout token id is < ``vocab_size``."""
        top = max(lv.end - 1 for lv in self.levels)
        for tok in (self.begin_token_id, self.end_token_id):
            if tok is not None:
                top = max(top, tok)
        if top >= vocab_size:
            raise ValueError(f"SID layout uses token id {top} but the vocabulary has {vocab_size}")

    # -- serialisation ------------------------------------------------------------------------

    def to_spec(self) -> str:
        spec = ",".join(f"{lv.base}:{lv.size}" for lv in self.levels)
        if self.begin_token_id is not None:
            spec += f";begin={self.begin_token_id}"
        if self.end_token_id is not None:
            spec += f";end={self.end_token_id}"
        return spec

    def to_dict(self) -> dict[str, Any]:
        return {
            "levels": [{"base": lv.base, "size": lv.size} for lv in self.levels],
            "begin_token_id": self.begin_token_id,
            "end_token_id": self.end_token_id,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SidLayout:
        try:
            levels = tuple(SidLevel(int(d["base"]), int(d["size"])) for d in data["levels"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed SID layout dict: {data!r}") from exc
        begin, end = data.get("begin_token_id"), data.get("end_token_id")
        return cls(levels, None if begin is None else int(begin), None if end is None else int(end))

    def _level_of(self, token: int) -> int | None:
        for i, lv in enumerate(self.levels):
            if lv.base <= token < lv.end:
                return i
        return None


def _parse_int(text: str, spec: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"SID layout spec {spec!r}: {text!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"SID layout spec {spec!r}: negative value {value}")
    return value


def _token_ids(data: dict[str, Any]) -> dict[str, int]:
    """token text -> id from a tokenizer.json's model vocab plus its added tokens."""
    out: dict[str, int] = {}
    vocab = data.get("model", {}).get("vocab") or {}
    if isinstance(vocab, dict):
        out.update({str(k): int(v) for k, v in vocab.items()})
    else:  # Unigram stores [[token, score], ...]; the id is the position.
        out.update({str(entry[0]): i for i, entry in enumerate(vocab)})
    for tok in data.get("added_tokens") or []:
        out[str(tok["content"])] = int(tok["id"])
    return out
