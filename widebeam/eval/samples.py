"""One evaluation sample (a prompt and the ids it should retrieve) and the input readers.

``load_samples`` reads a RecIF-Bench parquet (``PAR1`` magic; :mod:`widebeam.eval.recif`) or our
JSONL of item histories (:mod:`widebeam.eval.histories`); the file name does not matter.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

PARQUET_MAGIC = b"PAR1"


class Level(StrEnum):
    """What is matched against the targets: catalog items, or SIDs (``"a-b-c"``)."""

    ITEM = "item"
    SID = "sid"


class Route(StrEnum):
    RECOMMEND = "/v1/recommend"
    CHAT = "/v1/chat/completions"


@dataclass(frozen=True)
class EvalSample:
    sample_id: str
    targets: tuple[str, ...]  # relevant ids at the run's level, distinct, in the input's order
    history: tuple[str, ...] | None = None  # item ids, oldest first (-> /v1/recommend)
    messages: tuple[dict[str, str], ...] | None = None  # chat turns (-> /v1/chat/completions)

    @property
    def route(self) -> Route:
        return Route.RECOMMEND if self.history is not None else Route.CHAT


class SampleError(ValueError):
    """The evaluation data is malformed; the message names the line / row."""


def is_parquet(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC


def load_samples(
    path: str | Path, level: Level | None, limit: int | None = None
) -> tuple[list[EvalSample], Level]:
    """The samples of ``path`` (at most ``limit``) and the level they are matched at.

    ``level`` None: item for JSONL histories, sid for RecIF (its answers are SIDs).
    """
    from widebeam.eval import histories, recif

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"evaluation data {str(path)!r} is not a file")
    if is_parquet(path):
        level = level or Level.SID
        samples = recif.read_recif(path, level, limit)
    else:
        if level == Level.SID:
            raise SampleError(
                "--level sid needs RecIF data (SID answers); JSONL histories name items"
            )
        level = Level.ITEM
        samples = histories.read_histories(path, limit)
    if not samples:
        raise SampleError(f"{path}: no samples to evaluate")
    return samples, level
