"""A digest over everything an engine returned, for bit-for-bit comparisons of engine modes."""

from __future__ import annotations

import hashlib

from widebeam.services.decoder.requests.results import RequestOutput


def digest(outputs: list[RequestOutput]) -> str:
    h = hashlib.sha256()
    for out in outputs:
        h.update(repr((out.request_id, out.error, out.catalog_version)).encode())
        for b in out.beams:
            fields = (b.output_ids, b.score, b.cum_logprob, b.logprobs, b.item_ids, b.finish_reason)
            h.update(repr(fields).encode())
    return h.hexdigest()
