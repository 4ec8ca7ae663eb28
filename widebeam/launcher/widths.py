"""The widest beam and the most results a stack started by `widebeam up` serves:
`--max-beam-width` and `--max-n`, handed to every child that holds such a limit, so one flag
raises them all — the gateway's request limits, the decoder's request limits and its row count
(a beam of k rows needs k rows free), the batch worker's widening cap.

A flag left out passes nothing, so each child keeps its own default (or its environment
variable): the gateway's max_n follows its max_beam_width, the decoder's follows its own."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from widebeam.launcher.readiness import StartupError
from widebeam.services.decoder.config import EngineConfig

# Where the decoder reads its row count when no flag gives it (DecoderSettings' env prefix).
DECODER_MAX_ROWS_ENV = "WIDEBEAM_DECODER_MAX_ROWS"
# The batch worker's widening cap (BatchSettings' env prefix).
WORKER_MAX_BEAM_ENV = "WIDEBEAM_BATCH_MAX_BEAM_WIDTH"


def add_width_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--max-beam-width",
        type=int,
        help="widest beam a request may ask for, on the gateway, the decoder (its rows follow) "
        "and the batch worker (default: theirs, 512 on the gateway)",
    )
    add(
        "--max-n",
        type=int,
        help="most results (n) a request may ask for, on the gateway and the decoder "
        "(default: the widest beam, so n = beam_width is allowed)",
    )


@dataclass(frozen=True)
class Widths:
    max_beam_width: int | None
    max_n: int | None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Widths:
        widths = cls(args.max_beam_width, args.max_n)
        for flag, value in (("--max-beam-width", widths.max_beam_width), ("--max-n", widths.max_n)):
            if value is not None and value < 1:
                raise StartupError(f"{flag} must be >= 1, not {value}")
        beam, n = widths.max_beam_width, widths.max_n
        if beam is not None and n is not None and n > beam:
            raise StartupError(
                f"--max-n ({n}) exceeds --max-beam-width ({beam}): n results come from a beam "
                "at least n wide"
            )
        return widths

    def _limit_flags(self) -> list[str]:
        flags: list[str] = []
        if self.max_beam_width is not None:
            flags += ["--max-beam-width", str(self.max_beam_width)]
        if self.max_n is not None:
            flags += ["--max-n", str(self.max_n)]
        return flags

    def gateway_flags(self) -> list[str]:
        return self._limit_flags()

    def decoder_flags(self) -> list[str]:
        """The request limits, and enough rows for the widest beam (never fewer rows than the
        decoder would have had)."""
        flags = self._limit_flags()
        if self.max_beam_width is not None:
            rows = int(os.environ.get(DECODER_MAX_ROWS_ENV) or EngineConfig.max_rows)
            if self.max_beam_width > rows:
                flags += ["--max-rows", str(self.max_beam_width)]
        return flags

    def worker_env(self) -> dict[str, str]:
        if self.max_beam_width is None:
            return {}
        return {WORKER_MAX_BEAM_ENV: str(self.max_beam_width)}
