"""Run every benchmark and print one table of speed ratios against PyTorch's own modules.

Usage::

    python benchmarks/run_all.py                      # full sizes, print the table
    python benchmarks/run_all.py --quick              # small sizes, a smoke run
    python benchmarks/run_all.py --results results    # also write results/bench-<UTC>.json
    python benchmarks/run_all.py --clock cpu          # CPU time: steadier on a busy machine
    python benchmarks/run_all.py --only bench_fast    # only the named benchmarks

Each ``benchmarks/bench_*.py`` exposes ``run(quick=False, clock="wall") -> list[dict]``; this
script calls them all (in name order), turns their rows into one table -- name, ours,
reference, ratio, goal, met? -- and, with ``--results``, writes everything (the table, each
benchmark's raw rows, the machine, the git commit and the command) as one JSON record,
atomically. ``ratio`` is always "how many times faster than the reference" (>= 1: ours at
least as fast); ``goal`` is the ratio the course aims for:

=========================================  =====  ==========================================
comparison                                 goal   why
=========================================  =====  ==========================================
attention core, teaching vs fused SDPA     0.5    the explicit path exists to be read
decoding step attention, explicit vs fused 1.0    decoding uses the explicit path: it must win
MultiHeadAttention fast path vs torch      0.9    the same fused kernel plus our checks
MultiHeadAttention teaching vs torch       0.5    it also materialises the weights
training step vs nn.Transformer            0.9    the same arithmetic, no hidden shortcuts
train step vs MarianMTModel, same weights  0.9    a library's model of the same arithmetic
training step, CPU bf16 autocast vs fp32   1.2    "auto"'s margin; timed where it picks bf16
CPU bf16 step, attention core fp32 vs bf16 1.0    the fp32 core must pay for itself
greedy decoding, cache vs no cache         3.0    the KV cache must pay for itself
beam 4 vs greedy (greedy time / beam time) 1/3    beam search within 3x of greedy
val beam 4 and greedy, course vs generate  1.0    ours at least as fast as ``transformers``
val beam 4 / greedy, course vs CTranslate2 0      the gap to a C++ engine, measured
val greedy, compiled step vs generate      1.0    the compiled fast path against the library
fast_dropout vs F.dropout, fwd + bwd       1.0    the opt-in fast path must pay for itself
train step, fast dropout vs nn.Dropout     1.0    the same, in a whole step
greedy, static cache vs growing cache      1.0    the same, for greedy search's fast path
=========================================  =====  ==========================================

``bench_engines`` exports chapter 10's model (``transformer-book export``) and times the
course's decoding (greedy's compiled step included) against ``transformers``' ``generate``
and CTranslate2 (float32, int8; each in a process of its own) on the val split, printing its
own table with each engine's sacreBLEU.

``bench_fast`` times the opt-in fast paths against the defaults they replace (dropout's
cheaper masks, greedy search's static key/value cache), each row naming the CPU and the load.

``bench_peers`` times a training step of ``configs/small.toml``'s model against
``MarianMTModel`` and ``nn.Transformer`` holding the same weights, and the share of this
CPU's measured matrix-product peak the step reaches (MFU), with a profile of the step.

The benchmarks run on the CPU (the numbers are ratios, so they transfer between machines far
better than absolute times). Exit status 0 even when a goal is missed: the table says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the bench files import their shared helpers from _common.py
    sys.path.insert(0, str(HERE))

from _common import CLOCKS, write_json  # noqa: E402  (benchmarks/_common.py)

from transformer_book.util.records import (  # noqa: E402
    command_line,
    git_commit,
    hardware_info,
    utc_timestamp,
)
from transformer_book.util.validation import bad_input, require  # noqa: E402

# Goals for rows whose benchmark does not state its own (see the module docstring).
GOALS = {
    "attention fast": 0.9,
    "attention teaching": 0.5,
    "model": 0.9,
}


def discover(folder: Path = HERE) -> list[Path]:
    """The ``bench_*.py`` files of ``folder``, in name order."""
    return sorted(folder.glob("bench_*.py"))


def load(path: Path) -> ModuleType:
    """Import a benchmark file as a module (the folder is not a package)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    require(spec is not None and spec.loader is not None, "path", "a Python file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    require(callable(getattr(module, "run", None)), path.name, "a function run(quick, clock)",
            "none")
    return module


def _row(name: str, unit: str, ours: float, reference: float, ratio: float,
         goal: float, source: str) -> dict[str, Any]:
    return {"name": name, "unit": unit, "ours": float(ours), "reference": float(reference),
            "ratio": float(ratio), "goal": float(goal), "met": bool(ratio >= goal),
            "benchmark": source}


def normalise(source: str, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One benchmark's rows as table rows ``{name, unit, ours, reference, ratio, goal, met}``.

    ``bench_attention`` reports both paths of MultiHeadAttention in one row; it becomes two.
    Rows with ``name``/``ours``/``reference``/``ratio`` pass through, their ``goal`` taken
    from the row or from :data:`GOALS`.
    """
    table = []
    for row in rows:
        if row.get("benchmark") == "attention":  # bench_attention: one row, two paths
            size = f"B={row['B']} L={row['L']} d={row['d_model']} h={row['heads']}"
            table.append(_row(f"MultiHeadAttention fast path vs nn.MultiheadAttention, {size}",
                              "ms", row["fast_ms"], row["torch_ms"], row["fast_ratio"],
                              GOALS["attention fast"], source))
            table.append(_row(f"MultiHeadAttention teaching path vs nn.MultiheadAttention, "
                              f"{size}", "ms", row["teaching_ms"], row["torch_ms"],
                              row["teaching_ratio"], GOALS["attention teaching"], source))
            continue
        missing = [key for key in ("name", "ours", "reference", "ratio") if key not in row]
        if missing:
            raise bad_input(source, "rows with name/ours/reference/ratio",
                            f"a row without {missing}")
        goal = row.get("goal", GOALS.get(source.removeprefix("bench_")))
        require(goal is not None, source, "a goal in the row or in GOALS", "none")
        table.append(_row(row["name"], row.get("unit", ""), row["ours"], row["reference"],
                          row["ratio"], goal, source))
    return table


def select(paths: Sequence[Path], only: Sequence[str] | None) -> list[Path]:
    """The benchmark files named in ``only`` (stems such as ``bench_fast``), or all of them;
    a name that matches no file is refused."""
    if not only:
        return list(paths)
    stems = {path.stem for path in paths}
    unknown = [name for name in only if name not in stems]
    require(not unknown, "--only", f"benchmark names among {sorted(stems)}", unknown)
    return [path for path in paths if path.stem in only]


def run_all(quick: bool = False, clock: str = "wall", paths: Sequence[Path] | None = None,
            log: Callable[[str], None] = print) -> tuple[list[dict], dict[str, list[dict]]]:
    """Run every benchmark; return ``(table rows, {benchmark: raw rows})``."""
    table: list[dict] = []
    raw: dict[str, list[dict]] = {}
    for path in (discover() if paths is None else paths):
        module = load(path)
        log(f"running {path.name} ({'quick' if quick else 'full'}) ...")
        kwargs: dict[str, Any] = {"quick": quick}
        if "clock" in inspect.signature(module.run).parameters:
            kwargs["clock"] = clock
        rows = module.run(**kwargs)
        raw[path.stem] = rows
        table.extend(normalise(path.stem, rows))
    return table, raw


def median_table(tables: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One table from several runs of the same benchmarks: each row's median ours, reference
    and ratio, with every run's ratio kept under ``ratios`` (rows in the first run's order)."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for table in tables:
        for row in table:
            by_name.setdefault(row["name"], []).append(row)
    merged = []
    for name, rows in by_name.items():
        first = rows[0]
        row = _row(name, first["unit"], statistics.median(r["ours"] for r in rows),
                   statistics.median(r["reference"] for r in rows),
                   statistics.median(r["ratio"] for r in rows), first["goal"],
                   first["benchmark"])
        row["ratios"] = [r["ratio"] for r in rows]
        merged.append(row)
    return merged


def compare(table: Sequence[dict[str, Any]], previous: dict[str, Any],
            tolerance: float = 0.10) -> list[str]:
    """Rows whose ratio is more than ``tolerance`` worse than in the ``previous`` record (a
    bench JSON record), and rows the previous record had that this run lacks."""
    old = {row["name"]: row["ratio"] for row in previous["table"]}
    new = {row["name"]: row["ratio"] for row in table}
    worse = [f"{name}: {new[name]:.3f} against {ratio:.3f} ({new[name] / ratio - 1:+.1%})"
             for name, ratio in old.items() if name in new and new[name] < ratio * (1 - tolerance)]
    return worse + [f"{name}: missing" for name in old if name not in new]


def format_table(table: Sequence[dict[str, Any]]) -> str:
    """The one table: name, ours, reference (with unit), ratio, goal, met?."""
    width = max([len(r["name"]) for r in table] + [10])
    lines = [f"{'benchmark':<{width}} | {'ours':>10} {'reference':>10} {'unit':<8} | "
             f"{'ratio':>6} {'goal':>5} met?"]
    lines.append("-" * len(lines[0]))
    for r in table:
        lines.append(f"{r['name']:<{width}} | {r['ours']:>10.4g} {r['reference']:>10.4g} "
                     f"{r['unit']:<8} | {r['ratio']:>6.2f} {r['goal']:>5.2f} "
                     f"{'yes' if r['met'] else 'NO'}")
    met = sum(r["met"] for r in table)
    lines.append(f"{met} of {len(table)} goals met")
    return "\n".join(lines)


def write_results(folder: Path, record: dict[str, Any]) -> Path:
    """Write ``record`` to ``folder/bench-<UTC timestamp>.json`` atomically (temp + rename)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"bench-{utc_timestamp()}.json"
    counter = 1
    while target.exists():
        target = folder / f"bench-{utc_timestamp()}-{counter}.json"
        counter += 1
    write_json(record, target)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--results", type=Path, default=None,
                        help="write results/bench-<UTC timestamp>.json into this folder")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall time, or this process's CPU time (steadier when busy)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run everything this many times and report each row's median")
    parser.add_argument("--compare", type=Path, default=None,
                        help="a previous bench record: list the rows more than 10%% worse")
    parser.add_argument("--only", nargs="+", default=None, metavar="BENCH",
                        help="run only these benchmarks (file stems, e.g. bench_fast)")
    args = parser.parse_args(argv)
    require(args.repeat >= 1, "--repeat", "an integer >= 1", args.repeat)
    paths = select(discover(), args.only)
    runs = [run_all(quick=args.quick, clock=args.clock, paths=paths)
            for _ in range(args.repeat)]
    table = median_table([t for t, _ in runs]) if args.repeat > 1 else runs[0][0]
    raw = runs[0][1] if args.repeat == 1 else {"runs": [r for _, r in runs]}
    print(format_table(table))
    if args.compare is not None:
        worse = compare(table, json.loads(args.compare.read_text(encoding="utf-8")))
        print(f"against {args.compare}: " + ("; ".join(worse) if worse else
                                                "no ratio more than 10% worse"))
    if args.results is not None:
        record = {"kind": "bench", "quick": args.quick, "clock": args.clock,
                  "repeat": args.repeat, "only": args.only,
                  "command": command_line(["python", "benchmarks/run_all.py",
                                           *(sys.argv[1:] if argv is None else argv)]),
                  "git": git_commit(), "hardware": hardware_info("cpu"),
                  "table": table, "raw": raw}
        print(f"record: {write_results(args.results, record)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
