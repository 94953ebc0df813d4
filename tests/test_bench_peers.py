"""benchmarks/bench_peers.py: the course's training step against MarianMTModel and
nn.Transformer, and its share of the CPU's matmul peak. End to end at tiny sizes; the Marian
model proven to hold the course model's weights. No speed is judged here."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from transformer_book.util.env import cpu_name

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    if str(BENCHMARKS) not in sys.path:  # the bench files import _common, bench_model, mfu
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _load("bench_peers")


@pytest.fixture(scope="module")
def record(bench, tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    returned = bench.main(["--quick", "--results", str(folder)])
    (path,) = folder.glob("peers-*.json")
    written = json.loads(path.read_text())
    assert written["rows"] == json.loads(json.dumps(returned["rows"]))
    return written


@pytest.mark.slow
def test_quick_run_writes_a_record_naming_the_cpu_and_the_load(record):
    assert record["kind"] == "peers" and record["quick"] is True
    assert record["cpu"] == cpu_name() and record["threads"] == 1
    assert "--quick" in record["command"] and record["git"]
    for key in ("load_average_before", "load_average_after"):
        assert len(record[key]) == 3 and all(x >= 0 for x in record[key])
    assert record["parameters"] == 7_577_600  # configs/small.toml's model
    assert record["bf16"]["chosen"] in ("fp32", "bf16") and record["bf16"]["reason"]
    assert set(record["precisions"]) == {"fp32"} | ({"bf16"} if record["bf16"]["chosen"] ==
                                                   "bf16" else set())


@pytest.mark.slow
def test_ratios_flops_and_mfu_are_positive_and_finite(bench, record):
    rows = record["rows"]
    assert len(rows) == 3 * len(record["precisions"])
    assert any("MarianMTModel" in r["name"] for r in rows)
    assert any("nn.Transformer" in r["name"] for r in rows)
    for row in rows:
        fast = "--fast" in row["name"]
        for key in ("ratio", "ratio_of_medians", "ratio_best", "ours", "reference",
                    *(() if fast else ("mfu",))):
            assert math.isfinite(row[key]) and row[key] > 0, (key, row)
        assert row["cpu"] == record["cpu"]
        assert row["goal"] == (bench.FAST_GOAL if fast else bench.GOAL)
    for precision, m in record["precisions"].items():
        peak = record["peak"][precision]
        assert peak["flops_per_second"] == pytest.approx(2 * peak["n"] ** 3 / peak["best_seconds"])
        assert m["mfu"] == pytest.approx(m["flops_per_second"] / peak["flops_per_second"])
        assert len(m["seconds"]["marian"]) == bench.QUICK["repeats"]
    # the model's count (3 x the forward's products) against what torch counts in a step
    assert 0.9 < record["counted_over_formula"] < 1.1
    ops = record["profile"]
    assert 0 < len(ops) <= bench.TOP_OPS and 0 < sum(op["share"] for op in ops) <= 1 + 1e-9
    assert [op["self_ms_per_step"] for op in ops] == sorted(
        (op["self_ms_per_step"] for op in ops), reverse=True)


@pytest.mark.slow
def test_the_rows_join_run_all_s_table(record):
    run_all = _load("run_all")
    table = run_all.normalise("bench_peers", record["rows"])
    assert [r["ratio"] for r in table] == [r["ratio"] for r in record["rows"]]
    assert "bench_peers" in [p.stem for p in run_all.discover()]


def test_marian_holds_the_course_model_s_weights_on_the_batch(bench):
    """The proof that the comparison is fair: fp32 logits equal within 1e-4 on the timed batch
    (the full 64 x 16 + 16 one), and the check fails when one Marian weight changes."""
    config = bench.small_config()
    size = bench.FULL
    src, tgt = bench.make_batch(config, size["batch"], size["length"])
    assert src.shape == (64, 16) and tgt.shape == (64, 17) and (tgt[:, 0] == config.bos_id).all()
    named = bench.models(config, size["length"])
    ours, marian = named["ours"], named["marian"]
    assert ours.training and marian.training
    assert next(marian.parameters()).dtype == torch.float32
    assert bench.logit_difference(ours, marian, src, tgt) < 1e-4
    assert bench.logit_difference(ours, named[bench.FAST], src, tgt) == 0, "the same weights"
    assert ours.training and marian.training, "training mode restored"
    with torch.no_grad():
        marian.marian.model.decoder.layers[0].fc2.bias[0] += 1e-2
    assert bench.logit_difference(ours, marian, src, tgt) > 1e-4


def test_the_peak_counts_two_n_cubed_flops_per_product(bench, monkeypatch):
    monkeypatch.setattr(bench, "measure", lambda calls, repeats, warmup, clock: {
        "matmul": [calls["matmul"]() is not None and t for t in (0.5, 0.25, 0.75)]})
    peak = bench.gemm_peak(64, 3, torch.float32, "cpu")
    assert peak["best_seconds"] == 0.25 and peak["flops_per_second"] == 2 * 64**3 / 0.25
    assert peak["dtype"] == "float32" and peak["clock"] == "cpu"


def test_pairs_report_the_median_of_per_repeat_ratios(bench):
    times = {"ours": [1.0, 2.0, 1.0], "marian": [2.0, 2.0, 3.0]}
    pair = bench._pair(times, "ours", "marian")
    assert pair == {"ratio": 2.0, "ratio_of_medians": 2.0, "ratio_best": 2.0}
