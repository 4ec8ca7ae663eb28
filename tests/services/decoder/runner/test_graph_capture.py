"""A captured forward replays on new inputs written into its static buffers."""

from __future__ import annotations

import pytest
import torch

from widebeam.services.decoder.runner.graph_capture import capture

pytestmark = pytest.mark.gpu


def test_replay_reads_the_static_inputs() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    device = torch.device("cuda")
    x = torch.arange(8, dtype=torch.float32, device=device)
    weight = torch.randn(8, 8, device=device)
    graph, out = capture(lambda: torch.relu(weight @ x) + 1, device, torch.cuda.graph_pool_handle())
    for step in range(3):
        x.copy_(torch.randn(8, device=device) * step)
        graph.replay()
        torch.testing.assert_close(out, torch.relu(weight @ x) + 1)
