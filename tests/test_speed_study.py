"""The speed study: its counted crossovers solve the FLOP counts, its measured crossover
interpolates correctly, its grid runs and its records are found by device."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from transformer_book.analysis.complexity import (
    recurrent_flops_per_layer,
    self_attention_flops_per_layer,
)
from transformer_book.analysis.speed_study import (
    LAYERS,
    OPPONENTS,
    counted_crossover,
    counted_flops,
    crossover_rows,
    describe_crossover,
    measured_crossover,
    quiet_studies,
    run_speed_study,
    study_curves,
    study_layers,
)
from transformer_book.util.validation import BookError

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("d", [8, 64, 512])
@pytest.mark.parametrize("opponent", OPPONENTS)
def test_counted_crossover_is_where_the_counts_meet(opponent, d):
    crossover = counted_crossover(opponent, d)
    cheaper = [n for n in range(1, 5 * d)
               if counted_flops("self-attention", n, d) < counted_flops(opponent, n, d)]
    if crossover is None:
        assert cheaper == [], f"{opponent}: self-attention with projections is never cheaper"
    else:
        assert cheaper == list(range(1, math.ceil(crossover))), "cheaper exactly below it"
        n = int(crossover)
        assert counted_flops("self-attention", n, d) == counted_flops(opponent, n, d)


def test_table_1_line_and_exercise_03_4():
    d = 256
    assert counted_crossover("nn.RNN", d, include_projections=False) == d  # 4n²d = 4nd² at n = d
    assert self_attention_flops_per_layer(d, d) == recurrent_flops_per_layer(d, d)
    assert counted_crossover("nn.RNN", d) is None  # with projections: never (exercise 03.4)
    assert counted_crossover("nn.LSTM", d) == 2 * d  # n < 2d against an LSTM (exercise 03.4)
    assert counted_crossover("convolution", d) is None


def test_measured_crossover_interpolates_in_log_log():
    ns = [16, 64, 256]
    # ratios 1/4, 1, 4: the crossover is exactly at 64
    assert measured_crossover(ns, [1, 4, 16], [4, 4, 4]) == pytest.approx(64)
    # ratios 1/2, 2 between 16 and 64: halfway in log n, i.e. 32
    assert measured_crossover(ns[:2], [1, 4], [2, 2]) == pytest.approx(32)
    assert measured_crossover(ns, [5, 6, 7], [1, 1, 1]) == 0.0  # slower everywhere
    assert measured_crossover(ns, [1, 1, 1], [5, 6, 7]) == math.inf  # faster everywhere
    with pytest.raises(BookError, match="ns"):
        measured_crossover(ns, [1, 2], [1, 2, 3])


def test_describe_crossover():
    assert describe_crossover(None) == "never"
    assert describe_crossover(512.0) == "512"
    assert describe_crossover(311.7, [16, 1024]) == "≈ 310"
    assert describe_crossover(0.0, [16, 32]) == "< 16"
    assert describe_crossover(math.inf, [16, 32]) == "> 32"


def test_study_layers_map_a_sequence_to_a_sequence():
    layers = study_layers(16)
    assert tuple(layers) == LAYERS
    points = run_speed_study([2], [16], [4, 8], threads=[1, 2], repeats=1)
    assert len(points) == 2 * 2 * 2  # lengths x threads x modes
    assert all(set(p["seconds"]) == set(LAYERS) and min(p["seconds"].values()) > 0 for p in points)
    curves = study_curves(points, "forward", threads=1)
    assert list(curves) == [(2, 16)] and curves[(2, 16)]["ns"] == [4, 8]


def test_run_speed_study_rejects_bad_arguments():
    with pytest.raises(BookError, match="modes"):
        run_speed_study([1], [16], [4], modes=["backward"])
    with pytest.raises(BookError, match="ds"):
        run_speed_study([1], [0], [4])
    with pytest.raises(BookError, match="opponent"):
        counted_crossover("GRU", 16)


def _record(device: str, seconds: dict[str, list[float]], ns: list[int]) -> dict:
    points = [{"threads": 2, "batch": 1, "d": 16, "n": n, "mode": "forward+backward",
               "seconds": {name: seconds[name][i] for name in LAYERS}} for i, n in enumerate(ns)]
    return {"experiment": "speed-study", "hardware": {"device": device}, "points": points}


def test_crossover_rows_give_the_median_and_range_over_repeats():
    ns = [8, 16, 32]
    cpu = _record("cpu", {"self-attention": [1, 2, 8], "nn.RNN": [2, 2, 2],
                          "nn.LSTM": [4, 4, 4], "convolution": [0.5, 1, 2]}, ns)
    rows = {row["opponent"]: row for row in crossover_rows([cpu])}
    assert rows["nn.RNN"]["measured"] == "≈ 16" and rows["nn.LSTM"]["measured"] == "≈ 23"
    assert rows["convolution"]["measured"] == "< 8"
    assert rows["nn.LSTM"]["counted"] == "32" and rows["nn.RNN"]["counted"] == "never"
    slower = _record("cpu", {"self-attention": [1, 4, 8], "nn.RNN": [2, 2, 2],
                             "nn.LSTM": [4, 4, 4], "convolution": [0.5, 1, 2]}, ns)
    rows = {row["opponent"]: row for row in crossover_rows([cpu, slower, cpu])}
    assert rows["nn.RNN"]["measured"] == "≈ 16 [11 to 16]", "median of 3, and the range"
    assert rows["nn.RNN"]["repeats"] == 3
    assert rows["convolution"]["measured"] == "< 8", "the same in every repeat: no range"
    with pytest.raises(BookError, match="studies"):
        crossover_rows([])


def test_quiet_studies_leave_out_a_record_taken_on_a_busy_machine(tmp_path):
    for name, load in (("20260101T000000Z", 0.5), ("20260102T000000Z", 3.0)):
        record = _record("cpu", {k: [1, 1, 1] for k in LAYERS}, [8, 16, 32])
        record["hardware"]["cpu_count"] = 2
        record["load_average"] = {"before": [load, 0, 0], "after": [0.1, 0, 0]}
        record["kind"] = "speed"
        (tmp_path / f"speed-study-cpu-{name}.json").write_text(json.dumps(record))
    assert [r["load_average"]["before"][0] for r in quiet_studies(tmp_path)] == [0.5]
    assert quiet_studies(tmp_path, "cuda") == []


def test_the_script_writes_a_record_that_quiet_studies_find(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "speed_study.py"), "--quick",
                           "--repeats", "1", "--results", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    (path,) = tmp_path.glob("speed-study-cpu-*.json")
    record = json.loads(path.read_text())
    assert record["config"]["threads"] == [2, 1] and record["conventions"]["dtype"] == "float32"
    assert {"load_average", "git", "command", "seconds", "seed"} <= set(record)
    studies = quiet_studies(tmp_path, "cpu")
    assert not studies or studies[-1]["points"] == record["points"], "unless the load was high"
    assert quiet_studies(tmp_path, "cuda") == []
    assert len(crossover_rows([record])) == 2 * len(OPPONENTS)  # 2 batches, 1 d


def test_the_script_rejects_an_unknown_device(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "speed_study.py"),
                           "--device", "tpu", "--results", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and "--device" in done.stderr
