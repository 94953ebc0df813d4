"""benchmarks/bench_engines.py without the trained model: its rows and table from a synthetic
measurement (which engines, which way round each ratio, which goals), and the ``course fast``
engine's strategy on a fresh tiny model (``course compiled``'s is tested in
tests/test_static_cache.py). No timing here (speed is measured in benchmarks/)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import torch

from transformer_book.inference import translate_ids
from transformer_book.inference.beam import Beam
from transformer_book.inference.greedy import Greedy
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer

FOLDER = Path(__file__).resolve().parents[1] / "benchmarks"


def _bench() -> ModuleType:
    if str(FOLDER) not in sys.path:  # the benchmark imports benchmarks/_common.py
        sys.path.insert(0, str(FOLDER))
    spec = importlib.util.spec_from_file_location("bench_engines", FOLDER / "bench_engines.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _bench()
SECONDS = {"course": 10.0, "course fast": 8.0, "course compiled": 2.5, "course int8": 5.0,
           "transformers": 20.0, "ct2 float32": 4.0, "ct2 int8": 2.0}


def _measured() -> dict:
    """Each engine its own seconds and BLEU; ``same_as`` counts that tell the courses apart."""
    def engine(name: str, courses: tuple[str, ...]) -> dict:
        return {"seconds": SECONDS[name], "bleu": SECONDS[name] + 0.5,
                "warmup_seconds": SECONDS[name] + 60,
                "same_as": {c: 100 * (bench.COURSE.index(c) + 1) + len(name) for c in courses}}

    measured = {"sentences": 10, "threads": 2, "cpu": "a CPU",
                "ct2_trials": {"float32": {1: 0.5, 2: 0.3}, "int8": {1: 0.2, 2: 0.9}}}
    for search, (_, names) in bench.SEARCHES.items():
        courses = tuple(c for c in bench.COURSE if c in names)
        measured[search] = {name: engine(name, courses) for name in names}
    return measured


def test_batches_and_generate_rows_as_the_course_returns_them():
    assert [len(b) for b in bench._batches([[4] * n for n in range(70)])] == [32, 32, 6]
    assert bench._strip([1, 5, 6, 2, 0, 0]) == [5, 6] and bench._strip([1, 5, 0, 7]) == [5, 7]


def test_every_engine_against_the_course_then_each_course_engine_against_its_peer():
    rows = bench.rows(_measured())
    by_pair = {(r["name"].split(", ")[0], r["name"].split(", ")[1]): r for r in rows}
    beam, greedy = f"val beam {bench.BEAM}", "val greedy"
    assert list(by_pair) == [
        (beam, "course vs course int8"), (beam, "course vs transformers generate"),
        (beam, "course vs CTranslate2 float32"), (beam, "course vs CTranslate2 int8"),
        (beam, "course int8 vs CTranslate2 int8"),
        (greedy, "course vs course fast"), (greedy, "course vs course compiled"),
        (greedy, "course vs course int8"),
        (greedy, "course vs transformers generate"), (greedy, "course vs CTranslate2 float32"),
        (greedy, "course vs CTranslate2 int8"),
        (greedy, "course int8 vs CTranslate2 int8"),
        (greedy, "course fast vs transformers generate"),
        (greedy, "course compiled vs transformers generate"),
        (greedy, "course compiled vs CTranslate2 float32")]
    assert all(r["name"].endswith("10 sentences, 2 threads") and r["cpu"] == "a CPU"
               and r["unit"] == "s" for r in rows)
    engine = {label: name for name, label in bench.LABELS.items()}
    for (_, pair), row in by_pair.items():
        ours, reference = (engine[part] for part in pair.split(" vs "))
        assert row["ours"] == SECONDS[ours] and row["reference"] == SECONDS[reference]
        assert row["ratio"] == SECONDS[reference] / SECONDS[ours]  # > 1: ours is faster
        assert row["bleu_ours"] == SECONDS[ours] + 0.5
        assert row["warmup_ours"] == SECONDS[ours] + 60
        assert row["threads_reference"] == (1 if reference == "ct2 int8" else 2)
        assert row["reference_thread_trials"] == {"ct2 float32": {1: 0.5, 2: 0.3},
                                                  "ct2 int8": {1: 0.2, 2: 0.9}}.get(reference)
        assert row["bleu_reference"] == SECONDS[reference] + 0.5
        assert row["same_translations"] == 100 * (bench.COURSE.index(ours) + 1) + len(reference)
    goals = {pair: row["goal"] for (_, pair), row in by_pair.items() if row["goal"]}
    assert goals == {"course vs transformers generate": 1.0,
                     "course int8 vs CTranslate2 int8": 0.8,
                     "course fast vs transformers generate": 1.0,
                     "course compiled vs transformers generate": 1.0}
    assert by_pair[(beam, "course int8 vs CTranslate2 int8")]["ratio"] == 2.0 / 5.0
    assert by_pair[(greedy, "course fast vs transformers generate")]["ratio"] == 20.0 / 8.0


def test_the_interference_row_compares_the_fast_path_after_ctranslate2_with_before():
    measured = {**_measured(), "interference": {"before": [2.0, 4.0], "after": [5.0, 7.0]}}
    row = bench.rows(measured)[-1]
    assert bench.rows(measured)[:-1] == bench.rows(_measured())
    assert row["name"] == ("val greedy, course fast after CTranslate2 ran in its process vs "
                           "before, 10 sentences, 2 threads")
    assert (row["ours"], row["reference"], row["ratio"], row["goal"]) == (6.0, 3.0, 0.5, 0.0)
    assert (row["passes_before"], row["passes_after"]) == ([2.0, 4.0], [5.0, 7.0])


def test_the_table_shows_every_engine_and_the_goals():
    text = bench.format_table(_measured())
    assert text.startswith("10 val sentences, 2 threads (CTranslate2: float32 2, int8 1), a CPU")
    engines = [line.split("  ")[0].strip() for line in text.splitlines()[2:]
               if not line.startswith(("goals", "  "))]
    assert engines == [*bench.SEARCHES["beam"][1], *bench.SEARCHES["greedy"][1]]
    assert not set(bench.GREEDY_ONLY) & set(bench.SEARCHES["beam"][1])
    assert "  1.25x" in text and "  4.00x" in text  # course fast, compiled: 10 s / 8 s, / 2.5 s
    assert "    62.50" in text  # course compiled's warmup
    goals = text.split("goals")[1].splitlines()[1:]
    assert len(goals) == 6 and sum("missed" in g for g in goals) == 2  # int8: 0.4 < 0.8
    assert "course fast vs transformers generate, 10 sentences, 2 threads: 2.50 (goal 1, met)" \
        in text


def test_the_fast_engine_decodes_as_greedy_search_through_translate_ids():
    torch.manual_seed(0)
    config = TransformerConfig.preset("tiny", 40, max_len=32, dropout=0.0)
    model = Transformer(config).double().eval()
    gen = torch.Generator().manual_seed(0)
    sources = [torch.randint(4, 40, (n,), generator=gen).tolist() for n in (3, 9, 5, 7, 2)]
    args = {"max_len_a": 0.0, "max_len_b": 12}
    assert translate_ids(model, sources, Greedy(), cache="static", **args) == \
        translate_ids(model, sources, Beam(beam_size=1), **args)
