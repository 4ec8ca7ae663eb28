"""bench/decoder_responses.py builds the answer shape it times: one beam per hypothesis, each
with its tokens and item, and the response carries them all."""

from __future__ import annotations

from tests.bench.smoke import load_bench_module
from widebeam.services.decoder.server.convert import generate_response


def test_wide_output_is_a_constrained_answer() -> None:
    bench = load_bench_module("decoder_responses")
    out = bench.wide_output(64)
    assert len(out.beams) == 64 and all(len(b.output_ids) == 4 for b in out.beams)
    assert [b.item_ids for b in out.beams[:2]] == [["item-0"], ["item-1"]]
    response = generate_response("r", "default", out)
    assert len(response.beams) == 64 and response.beams[63].item_ids == ["item-63"]


def test_with_tree_times_another_checkouts_code(tmp_path) -> None:
    """Run through `with_tree.py DIR`, the bench times DIR's code: a copy of this checkout's
    package whose `generate_response` is replaced says so in the timed run."""
    import shutil
    import subprocess
    import sys

    from tests.bench.smoke import BENCH

    root = BENCH.parent
    copy = tmp_path / "other"
    for folder in ("widebeam", "services"):
        shutil.copytree(root / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    convert = copy / "services" / "decoder" / "server" / "convert.py"
    convert.write_text(
        convert.read_text() + "\n\ndef generate_response(*args):\n    print('other tree')\n"
    )
    script = ["decoder_responses.py", "--beams", "4", "--repeat", "1"]
    run = subprocess.run(
        [sys.executable, "with_tree.py", copy, *script],
        cwd=BENCH, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert run.stdout.splitlines()[1] == "other tree", run.stdout + run.stderr
