"""`widebeam decoder serve` as a real process: settings from flags and env, SIGTERM exits 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import grpc
from google.protobuf import empty_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.services.decoder.conftest import SidModel
from tests.support.output_lines import OutputLines
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc

SERVING = re.compile(r"decoder serving on (\S+):(\d+)")


def test_serve_command(sid_model: SidModel) -> None:
    env = os.environ | {"WIDEBEAM_DECODER_MAX_WAITING": "7", "WIDEBEAM_DECODER_MAX_ROWS": "99"}
    command = [sys.executable, "-m", "widebeam", "decoder", "serve", "--model",
               str(sid_model.model_dir), "--catalog", str(sid_model.catalog_path), "--port", "0",
               "--max-rows", "32", "--max-kv-slots", "4096"]  # fmt: skip
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    output = OutputLines(proc.stderr)
    try:
        match = output.wait_for(SERVING, proc, timeout=60)
        with grpc.insecure_channel(f"{match[1]}:{match[2]}") as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            stub = pb_grpc.DecoderStub(channel)
            info = stub.GetInfo(empty_pb2.Empty(), timeout=5)
            assert info.limits.max_rows == 32  # the flag beats the environment
            assert info.limits.max_waiting == 7  # the environment beats the default
            response = stub.Recommend(pb.RecommendRequest(n=3), timeout=30)
            assert len(response.items) == 3
            # SIGTERM drains: a request in flight still completes, then the process exits 0.
            request = pb.GenerateRequest(
                input_ids=[1], beam_width=8, max_new_tokens=60, custom_eos=True
            )
            in_flight = stub.Generate.future(request, timeout=30)
            while stub.GetInfo(empty_pb2.Empty(), timeout=5).load.rows_in_use == 0:
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            assert len(in_flight.result().beams[0].output_ids) == 60
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_missing_model_is_a_clear_error() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WIDEBEAM_DECODER_")}
    result = subprocess.run(
        [sys.executable, "-m", "widebeam", "decoder", "serve"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "model: Field required" in result.stderr
