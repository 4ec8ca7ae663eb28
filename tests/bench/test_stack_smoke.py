"""`bench/stack.py --smoke`: engine in-process, gRPC Recommend, REST /v1/recommend and the chat
route, and the open-loop sweep, end to end on CPU with the tiny model, the decoder's port served
by an API process (`--api-processes 1`; the port in the engine's process is every other
decoder test's); its JSON report holds every path and width, every closed-loop request
answered, the engine measured before, between and after two rounds of the servers (each
round's ratios against the passes around it, their median, the drift), every phase's
prompts prefilled whole (new histories: none found in a cache an earlier phase filled), a
device timeline of each phase (`--timeline`: the decoder's through its SIGUSR1
recorder; on CPU only the host's phases), and no graph capture after ready."""

from __future__ import annotations

from pathlib import Path

from tests.bench.smoke import run_smoke

# (path, round) with --rounds 2: the engine before, between and after the servers' two rounds;
# the chat route in the first round only
ROWS = {("engine", 0), ("engine", 1), ("engine", 2), ("grpc Recommend", 0), ("grpc Recommend", 1),
        ("REST /v1/recommend", 0), ("REST /v1/recommend", 1), ("REST chat", 0)}  # fmt: skip
PROMPT_TOKENS = 60 * 5 + 1  # 60 items of <begin> 3 codes <end>, then the begin token


def test_stack_smoke_run(tmp_path: Path) -> None:
    report, stdout = run_smoke(
        "stack.py", tmp_path, "--cache", str(tmp_path), "--api-processes", "1",
        "--timeline", str(tmp_path / "timelines"), "--sweep-deadline-ms", "60000",
        "--admission-ratio", "1.0", "--rounds", "2",
    )  # fmt: skip
    assert report["env"]["api_processes"] == 1
    assert report["env"]["client_processes"] == 2  # one per client: --concurrency 2
    assert report["env"]["admission_ratio"] == 1.0  # the engine's and the decoder's
    assert report["env"]["sweep_deadline_ms"] == 60000  # the sweep's bodies carry timeout_ms
    rows = report["closed_loop"]
    assert sorted((r["path"], r["round"]) for r in rows) == sorted(ROWS)
    assert {r["width"] for r in rows} == {4}
    for row in rows:
        answered = sum(row["statuses"].get(ok, 0) for ok in ("ok", "OK", "200"))
        assert answered == sum(row["statuses"].values()) == 4, row
        assert row["answered_rps"] > 0 and row["p99_ms"] >= row["p50_ms"] > 0
        assert row["captures"] == 0  # per phase (CPU: no graphs at all)
        batching = row["batching"]  # the engine's counters over the phase
        assert batching["requests_per_prefill"] >= 1 and batching["rows_per_decode"] >= 4, row
        assert batching["decodes_per_request"] > 0 and batching["expansions_per_request"] >= 0
        assert 0 < batching["busy"] <= 1.05, row  # a share of the phase's wall time
        if row["path"].startswith("engine"):  # its loop submits each request itself
            assert batching["inbox_ms_per_request"] == 0, row
        else:  # the decoder's inbox, read from its metrics
            assert 0 < batching["inbox_ms_per_request"] < 60_000, row
        if row["path"] != "REST chat":  # (its chat template's tokens are every prompt's prefix)
            # each phase sends new histories: no prompt is found in a cache an earlier one filled
            assert batching["prefill_tokens_per_request"] == PROMPT_TOKENS, row
        assert row["gpu"] == {}  # no nvidia-smi on a CPU machine: no clock samples
        assert row["host_probe_ms"] > 0, row  # the host's speed right before the phase
        # busy cores over the phase: read, never negative (their size is the machine's)
        assert set(row["host_cpu"]) == {"host", "ours", "others", "steal"}, row
        assert min(row["host_cpu"].values()) >= 0, row
        assert row["started_unix"] > 0, row  # to align with host_watch.py's series
        timeline = row["timeline"]  # the engine thread's steps over the timed loop
        assert timeline["steps"] >= 2, row  # 4 requests of 3 tokens each
        assert {"prefill", "decode", "select", "finish"} <= set(timeline["host_ms_by_phase"])
        if not row["path"].startswith("engine"):  # each server process's host time per
            # request (its size depends on the machine, and /proc counts in 10 ms ticks: only
            # that it is read)
            assert set(row["cpu_ms_per_request"]) == {"decoder", "decoder API", "gateway"}, row
            assert min(row["cpu_ms_per_request"].values()) >= 0, row
    # The sweep's outcome depends on speed (its deadlines are short on purpose): only that it
    # ran and answered is checked here; tests/services/gateway/test_shedding_by_wait.py holds
    # the shedding rule's counts.
    [sweep] = report["sweep"]
    assert sweep["load"] == 2.0 and sweep["statuses"].get("200", 0) > 0, sweep
    assert sweep["deadline_ms"] == 60000  # what its clients sent
    # the answered latency split by the gateway's Server-Timing header
    parts = sweep["latency_parts"]
    assert set(parts) == {"decoder", "gateway", "outside"}, sweep
    assert parts["decoder"]["p50_ms"] > 0 and parts["gateway"]["p50_ms"] >= 0, sweep
    assert sweep["captures_in_sweep"] == 0
    assert report["decoder_captures_after_ready"] == 0
    assert set(report["decoder_captures_after_ready_by_kind"]) == {"decode", "prefill", "expansion"}
    assert report["engine_captures_after_ready"] == 0
    # the engine measured again after each round of the servers: last ÷ first, per width
    assert set(report["engine_drift"]) == {"4"} and report["engine_drift"]["4"] > 0
    assert "engine drift (last pass ÷ first, req/s): n = 4:" in stdout
    # each round against the engine's passes around it, and the median over the two rounds
    medians = {(m["path"], m["rounds"]) for m in report["median_over_rounds"]}
    assert medians == {("grpc Recommend", 2), ("REST /v1/recommend", 2), ("REST chat", 1)}
    assert "| median ÷ engine |" in stdout
    assert "graph captures after ready: decoder 0" in stdout
    written = sorted(p.name for p in (tmp_path / "timelines" / "decoder").iterdir())
    assert written == [f"timeline-{k}.json" for k in range(1, 6)]  # one per service phase
    assert "| device busy |" in stdout
    assert "| host probe ms |" in stdout
