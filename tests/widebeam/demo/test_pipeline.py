"""The whole demo pipeline on a tiny config (seconds), its cache and its CLI; a real training
run of the demo's own world and model (`slow`) must beat popularity, and so must `make demo`'s
build wherever one is cached."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from widebeam.cli import main
from widebeam.demo.build import DEFAULT_OUT, DemoArtifacts, build_demo, cached_artifacts
from widebeam.demo.config import DemoConfig, tiny_config
from widebeam.services.catalog.formats.jsonl_table import parse_jsonl
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.model.transformer import CausalLM


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> DemoArtifacts:
    return build_demo(tmp_path_factory.mktemp("demo"), tiny_config(), progress=False)


def test_artifacts(tiny: DemoArtifacts) -> None:
    assert tiny.rebuilt
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json"):
        assert (tiny.model_dir / name).is_file()
    gen = json.loads((tiny.model_dir / "generation_config.json").read_text())
    assert gen["eos_token_id"]
    layout = SidLayout.from_tokenizer(tiny.model_dir)
    assert layout is not None and [lv.size for lv in layout.levels] == [8, 8, 8]
    assert layout.begin_token_id is not None and layout.end_token_id is not None
    model = CausalLM.from_pretrained(tiny.model_dir)
    assert model.config.num_hidden_layers == 2
    with tiny.catalog.open("rb") as fh:
        table = parse_jsonl(fh)
    assert table.num_items == 200
    first = json.loads(tiny.catalog.read_text().splitlines()[0])
    assert set(first) == {"item_id", "sid", "popularity", "title", "category"}
    assert first["title"].startswith("Item 0000 (category ")
    histories = [json.loads(x) for x in tiny.histories.read_text().splitlines()]
    assert len(histories) == 40 and all(h["history"] and h["held_out"] for h in histories)


def test_eval_report(tiny: DemoArtifacts) -> None:
    facts = json.loads(tiny.eval_json.read_text())
    rows = {r["method"]: r for r in facts["eval"]["rows"]}
    constrained = rows["constrained beam (catalog trie)"]
    assert constrained["illegal_rate"] == 0.0  # the trie allows catalog SIDs only
    assert 0.0 <= rows["unconstrained beam"]["illegal_rate"] <= 1.0
    for row in rows.values():
        assert 0.0 <= row["ndcg"] <= row["recall"] <= 1.0
    assert "Recall@10" in facts["table"] and "popularity" in facts["table"]
    assert facts["train"]["steps"] == 5 and facts["sids"]["num_items"] == 200
    assert set(facts["step_seconds"]) == {"data", "sids_catalog", "train", "eval"}


def test_a_seed_builds_the_same_model_and_table(
    tiny: DemoArtifacts, tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    threads = torch.get_num_threads()
    # Not the build's one thread (e.g. a 1-thread test worker), so a leak would show.
    torch.set_num_threads(tiny_config().threads + 1)
    try:
        again = build_demo(tmp_path, tiny_config(), force=True, progress=True)
        assert torch.get_num_threads() == tiny_config().threads + 1  # the build's does not leak
    finally:
        torch.set_num_threads(threads)
    assert again.eval_table() == tiny.eval_table()
    model = "model/model.safetensors"
    assert (again.root / model).read_bytes() == (tiny.root / model).read_bytes()
    log = capfd.readouterr().err
    for bar in ("demo: data:", "demo: training:", "demo: evaluating:"):
        assert bar in log, log
    assert "demo: trained 5 steps (" in log and "demo: evaluated 40 held-out users" in log


def test_cache_hit_and_invalidation(tiny: DemoArtifacts) -> None:
    def written() -> dict[Path, int]:
        return {p: p.stat().st_mtime_ns for p in tiny.root.rglob("*") if p.is_file()}

    before = written()
    again = build_demo(tiny.root, tiny_config(), progress=False)
    assert not again.rebuilt and written() == before  # a hit rewrites nothing
    assert again.model_dir == tiny.model_dir
    cfg = tiny_config()
    changed = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, seed=1))
    assert changed.fingerprint() != cfg.fingerprint()
    assert DemoConfig().fingerprint() != cfg.fingerprint()


def test_cli_prints_model_and_catalog(tiny: DemoArtifacts, capsys: pytest.CaptureFixture) -> None:
    assert main(["demo", "build", "--tiny", "--out", str(tiny.root), "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"model: {tiny.model_dir}" in lines
    assert f"catalog: {tiny.catalog}" in lines
    assert any(line.startswith("constrained beam") for line in lines)


def test_transformers_loads_the_checkpoint(tiny: DemoArtifacts) -> None:
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny.model_dir, dtype=torch.float32)
    tok = transformers.AutoTokenizer.from_pretrained(tiny.model_dir)
    ids = tok("<|sid_begin|><s_a_1><s_b_2><s_c_3><|sid_end|><|sid_begin|>")["input_ids"]
    assert len(ids) == 6
    ours = CausalLM.from_pretrained(tiny.model_dir)
    from widebeam.services.decoder.model.attention_context import DenseCausalAttention

    x = torch.tensor(ids)
    with torch.no_grad():
        mine = ours.compute_logits(ours(x, torch.arange(len(ids)), DenseCausalAttention()))
        theirs = hf(x[None]).logits[0]
    torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)


SHORT_EPOCHS = 1


def _shortened_demo_config() -> DemoConfig:
    """`make demo`'s world, SIDs, model and training recipe, trained 1 of its 8 epochs (an
    eighth of its steps) and evaluated on 300 of its 1,000 held-out users: a real trained model
    at an eighth of the full build's minutes (which grow with the machine's load); the test
    asserts what one epoch must already reach (twice popularity's recall and NDCG)."""
    full = DemoConfig()
    return dataclasses.replace(
        full,
        train=dataclasses.replace(full.train, epochs=SHORT_EPOCHS),
        eval=dataclasses.replace(full.eval, num_users=300),
    )


def _assert_beats_popularity(art: DemoArtifacts) -> None:
    rows = {r["method"]: r for r in json.loads(art.eval_json.read_text())["eval"]["rows"]}
    model, pop = rows["constrained beam (catalog trie)"], rows["popularity (top items in training)"]
    assert model["recall"] > 2 * pop["recall"] and model["ndcg"] > 2 * pop["ndcg"], rows
    assert model["illegal_rate"] == 0.0


@pytest.mark.slow
def test_trained_demo_model_beats_popularity(tmp_path: Path) -> None:
    cfg = _shortened_demo_config()
    art = build_demo(tmp_path, cfg, progress=False)
    facts = json.loads(art.eval_json.read_text())
    steps_per_epoch = math.ceil(cfg.data.num_users / cfg.train.batch_size)
    assert facts["train"]["steps"] == SHORT_EPOCHS * steps_per_epoch
    assert facts["eval"]["users"] == 300 and facts["sids"]["num_items"] == cfg.data.num_items
    _assert_beats_popularity(art)


def test_full_demo_beats_popularity() -> None:
    # Reads `make demo`'s cache (no training): the full build's own table, where one is current.
    art = cached_artifacts(DEFAULT_OUT, DemoConfig())
    if art is None:
        pytest.skip(f"no current `make demo` build under {DEFAULT_OUT}")
    _assert_beats_popularity(art)
