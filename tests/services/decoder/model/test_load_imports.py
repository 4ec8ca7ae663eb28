"""Loading a checkpoint builds the model on meta without importing torch's compiler stack
(`torch._dynamo`): Embedding's own init did, about a second of every decoder and CLI start."""

from __future__ import annotations

import subprocess
import sys

from tests.services.decoder.conftest import SidModel

SCRIPT = """
import sys
from widebeam.services.decoder.model.transformer import CausalLM
model = CausalLM.from_pretrained(sys.argv[1])
assert model.model.embed_tokens.weight.abs().sum() > 0  # the checkpoint's table, loaded
print("torch._dynamo" in sys.modules)
"""


def test_loading_a_checkpoint_does_not_import_dynamo(sid_model: SidModel) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(sid_model.model_dir)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
