"""What the decoder's processes set of the interpreter itself before they serve."""

from __future__ import annotations

import sys

from widebeam.services.decoder.server.settings import DecoderSettings


def tune_interpreter(settings: DecoderSettings) -> None:
    """The thread switch interval: a thread waiting for the GIL asks the holder to drop it
    after this long. The engine thread keeps it through most of a step's host work (torch
    launches hold it), so the gRPC loop's answers and new requests wait up to an interval each
    time they need it; a shorter one lets them through sooner."""
    sys.setswitchinterval(settings.switch_interval_ms / 1000)
