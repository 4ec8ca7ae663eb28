"""SIDs written as text, as OneRec-style models and RecIF write them:
``<|sid_begin|><s_a_340><s_b_6566><s_c_5603><|sid_end|>``.

A SID's id at the ``sid`` level is its codes joined by ``-`` (``"340-6566-5603"``), the same
spelling a SID-only FlashRec catalog gives its items.
"""

from __future__ import annotations

import re

from widebeam.services.catalog.formats.flashrec import sid_item_id

SID_BEGIN = "<|sid_begin|>"
SID_END = "<|sid_end|>"
THINK_END = "</think>"
_CODE = re.compile(r"<s_([a-z])_(\d+)>")
_BLOCK = re.compile(re.escape(SID_BEGIN) + r"(.*?)" + re.escape(SID_END), re.DOTALL)


def codes_in(text: str) -> tuple[int, ...] | None:
    """The codes of the first run of level tokens ``<s_a_N><s_b_N>...`` in ``text`` (levels in
    order from ``a``, nothing between them), or None when there is none."""
    codes: list[int] = []
    end = None
    for m in _CODE.finditer(text):
        if codes and (m.start() != end or ord(m.group(1)) - ord("a") != len(codes)):
            break
        if not codes and m.group(1) != "a":
            continue
        codes.append(int(m.group(2)))
        end = m.end()
    return tuple(codes) or None


def generated_sid(text: str) -> str | None:
    """The SID id a generation names: its first SID after any ``</think>``; None if it has none."""
    codes = codes_in(text.rsplit(THINK_END, 1)[-1])
    return None if codes is None else sid_item_id(codes)


def answer_sids(answer: str) -> list[str]:
    """The SID ids of a RecIF answer ``<|sid_begin|>...<|sid_end|>...``, first occurrence order."""
    found = (codes_in(block) for block in _BLOCK.findall(answer))
    return list(dict.fromkeys(sid_item_id(codes) for codes in found if codes))
