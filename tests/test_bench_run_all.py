"""benchmarks/run_all.py: discovery, one table from every benchmark's rows, atomic JSON.

No timing here (speed is measured in benchmarks/, never in unit tests): fake benchmark files
return fixed rows.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from transformer_book.util.validation import BookError

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("run_all", ROOT / "benchmarks" / "run_all.py")
run_all = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_all)

ATTENTION_ROW = {"benchmark": "attention", "B": 32, "L": 128, "d_model": 512, "heads": 8,
                 "torch_ms": 10.0, "fast_ms": 9.0, "teaching_ms": 25.0,
                 "fast_ratio": 10 / 9, "teaching_ratio": 0.4}


def test_every_benchmark_is_discovered_and_has_run():
    names = [p.stem for p in run_all.discover()]
    assert {"bench_attention", "bench_decode", "bench_fast", "bench_model",
            "bench_sdpa"} <= set(names)
    for path in run_all.discover():
        assert callable(run_all.load(path).run)


def test_attention_rows_become_two_rows_with_goals():
    rows = run_all.normalise("bench_attention", [ATTENTION_ROW])
    assert [r["name"].split(",")[0] for r in rows] == [
        "MultiHeadAttention fast path vs nn.MultiheadAttention",
        "MultiHeadAttention teaching path vs nn.MultiheadAttention"]
    assert [r["met"] for r in rows] == [True, False]  # 1.11 >= 0.9; 0.4 < 0.5
    assert rows[0]["ours"] == 9.0 and rows[0]["reference"] == 10.0


def test_generic_rows_take_their_goal_from_the_row_or_the_table():
    decode = run_all.normalise("bench_decode", [{"name": "greedy", "unit": "s", "ours": 1.0,
                                                 "reference": 4.0, "ratio": 4.0, "goal": 3.0}])
    model = run_all.normalise("bench_model", [{"name": "train step", "unit": "tokens/s",
                                               "ours": 80.0, "reference": 100.0, "ratio": 0.8}])
    assert decode[0]["met"] and decode[0]["goal"] == 3.0
    assert model[0]["goal"] == run_all.GOALS["model"] and not model[0]["met"]


def test_bad_rows_are_named():
    with pytest.raises(BookError, match=r"bench_x: expected rows with name/ours/reference/"
                                         r"ratio, received a row without \['ratio'\]"):
        run_all.normalise("bench_x", [{"name": "n", "ours": 1, "reference": 1}])
    with pytest.raises(BookError, match="bench_x: expected a goal"):
        run_all.normalise("bench_x", [{"name": "n", "ours": 1, "reference": 1, "ratio": 1}])


def test_run_all_with_fake_benchmarks_and_the_json_record(tmp_path, capsys):
    fake = tmp_path / "bench_fake.py"
    fake.write_text("def run(quick=False, clock='wall'):\n"
                    "    return [{'name': f'fake {quick} {clock}', 'unit': 's', 'ours': 1.0,\n"
                    "             'reference': 2.0, 'ratio': 2.0, 'goal': 1.0}]\n")
    old = tmp_path / "bench_old.py"  # a benchmark without the clock argument still runs
    old.write_text("def run(quick=False):\n    return [{'name': 'old', 'ours': 1, "
                   "'reference': 1, 'ratio': 1.0, 'goal': 2.0}]\n")
    table, raw = run_all.run_all(quick=True, clock="cpu", paths=[fake, old], log=lambda m: None)
    assert [r["name"] for r in table] == ["fake True cpu", "old"]
    assert set(raw) == {"bench_fake", "bench_old"}
    text = run_all.format_table(table)
    assert "1 of 2 goals met" in text and " NO" in text and " yes" in text
    path = run_all.write_results(tmp_path / "results", {"table": table, "raw": raw})
    assert path.name.startswith("bench-") and path.suffix == ".json"
    assert json.loads(path.read_text())["table"] == table
    assert not list((tmp_path / "results").glob("*.tmp")), "no temporary file left behind"
    second = run_all.write_results(tmp_path / "results", {"table": []})
    assert second != path, "two records in the same second get different names"


def test_a_file_without_run_is_refused(tmp_path):
    broken = tmp_path / "bench_broken.py"
    broken.write_text("x = 1\n")
    with pytest.raises(BookError, match=r"bench_broken.py: expected a function run"):
        run_all.load(broken)


def _table_row(name, ratio):
    return {"name": name, "unit": "ms", "ours": 1.0 / ratio, "reference": 1.0, "ratio": ratio,
            "goal": 1.0, "met": ratio >= 1.0, "benchmark": "bench_x"}


def test_repeated_runs_report_each_rows_median():
    runs = [[_table_row("a", r), _table_row("b", 2 * r)] for r in (1.0, 3.0, 2.0)]
    table = run_all.median_table(runs)
    assert [row["name"] for row in table] == ["a", "b"]
    assert [row["ratio"] for row in table] == [2.0, 4.0]
    assert table[0]["ratios"] == [1.0, 3.0, 2.0]
    assert table[1]["met"] is True


def test_compare_lists_rows_more_than_ten_percent_worse_and_missing_ones():
    previous = {"table": [_table_row("a", 1.0), _table_row("b", 1.0), _table_row("c", 1.0)]}
    worse = run_all.compare([_table_row("a", 0.95), _table_row("b", 0.85)], previous)
    assert len(worse) == 2
    assert worse[0].startswith("b: 0.850 against 1.000 (-15.0%)")
    assert worse[1] == "c: missing"


def test_bench_model_times_two_equal_models():
    """bench_model copies nn.Transformer's weights into ours (nn.Transformer's layout): the
    two compute the same logits, so the benchmark compares like with like (no timing)."""
    import sys

    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        model_spec = importlib.util.spec_from_file_location(
            "bench_model", ROOT / "benchmarks" / "bench_model.py")
        bench_model = importlib.util.module_from_spec(model_spec)
        model_spec.loader.exec_module(bench_model)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    ref, ours = bench_model.equal_models(max_len=15, dropout=0.0, preset="tiny")
    ref, ours = ref.eval(), ours.eval()
    src = torch.randint(3, bench_model.VOCAB, (2, 7))
    tgt = torch.randint(3, bench_model.VOCAB, (2, 5))
    with torch.no_grad():
        torch.testing.assert_close(ours(src, tgt), ref(src, tgt), rtol=1e-4, atol=1e-4)


def test_only_runs_the_named_benchmarks(tmp_path, capsys):
    for name in ("bench_a", "bench_b"):
        (tmp_path / f"{name}.py").write_text(
            "def run(quick=False, clock='wall'):\n"
            f"    return [{{'name': '{name}', 'ours': 1, 'reference': 2, 'ratio': 2, "
            "'goal': 1}]\n")
    paths = run_all.discover(tmp_path)
    chosen = run_all.select(paths, ["bench_b"])
    assert [p.stem for p in chosen] == ["bench_b"]
    assert run_all.select(paths, None) == paths
    table, raw = run_all.run_all(quick=True, paths=chosen, log=lambda _: None)
    assert [r["name"] for r in table] == ["bench_b"] and set(raw) == {"bench_b"}
    with pytest.raises(BookError, match=r"--only: expected benchmark names among "
                                        r"\['bench_a', 'bench_b'\], received \['bench_c'\]"):
        run_all.select(paths, ["bench_c"])
