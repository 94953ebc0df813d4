"""Decoding against production engines: the course's beam search and greedy search (float32,
int8, and greedy's fast path, eager and compiled), ``transformers``' ``generate`` and
CTranslate2 (float32 and int8), on the same weights over Multi30k's val split.

Usage: ``python benchmarks/bench_engines.py [--quick] [--limit N] [--threads 2]
[--results results] [--json PATH]``; ``make bench`` runs it through ``run_all.py``.

The weights are chapter 10's model (:func:`transformer_book.course.cache.train_chapter10_model`:
trained first, about 5 minutes, when the course cache lacks it), exported with
``transformer-book export``'s code (:func:`~transformer_book.interop.hf_export.export_checkpoint`)
and converted for CTranslate2 (:func:`~transformer_book.interop.ctranslate.convert`). Every
engine decodes the same length-sorted batches of ``BATCH`` val sentences with beam 4 and
α = 0.6, and at most ``|x| + 50`` tokens (Section 6.1) for the batch's longest source ``x``
(``generate`` and CTranslate2 take one limit per batch, so the course gets it too), on
``--threads`` intra-op threads (2 by default: the course machine's cores; CTranslate2 on 1
or that many, whichever decodes the first batch faster, :func:`_translators`; its rows keep
both timings, ``reference_thread_trials``). The batches are
timed in turn, the engines' order rotating from batch to batch, so that a change in the
machine's load falls on all of them alike; each engine first decodes one batch untimed
(its seconds are recorded as ``warmup_seconds``: for ``course compiled``, mostly
compiling). Each CTranslate2 engine decodes in a process of its own
(:class:`~transformer_book.interop.ctranslate.TranslatorProcess`, timed there): each
multi-threaded OpenMP user keeps a team of threads alive, and with more of them than cores
in one process, small operations slow down (the last row measures PyTorch's after
CTranslate2 has run beside it).

The course's engines (:data:`COURSE`) all decode with ``translate_ids``, as the CLI does:

- ``course``: the float32 model, ``Beam(beam_size=4, alpha=0.6)``, or ``Beam(beam_size=1)``
  for greedy search, with the growing key/value cache (the default);
- ``course int8``: the same on :func:`~transformer_book.inference.quantize.quantize_for_decoding`'s
  copy (dynamic int8 linear layers), the course's counterpart of CTranslate2's int8; its
  BLEU beside the float32 course's shows what int8 costs (the aim: within 0.5);
- ``course fast``: greedy search with the static key/value cache (``Greedy()`` with
  ``cache="static"``). It decodes greedy search only (:data:`SEARCHES`): for beam search
  the static cache copies full-size buffers at every reorder and was slower than the
  growing one where measured (AMD EPYC). Its tokens are the ``course`` greedy ones
  (``= course`` counts them: fewer than every sentence would be a bug);
- ``course compiled``: that cache with the step compiled (``cache="compiled"``:
  ``torch.compile`` of the decoder, inductor), greedy search only too;
  the same tokens up to float32 rounding.

Not equal, by design: the length penalty. The course divides a hypothesis' log-probability
by Wu et al.'s ``((5 + |Y|) / 6)^α`` and stops a sentence when no live hypothesis can still
beat its best finished one; ``generate`` and CTranslate2 divide by ``|Y|^α`` and stop by
their own rules. So the beam-4 translations differ a little, and each engine's sacreBLEU is
reported. Greedy search is exactly the same model in all of them (the tests prove it for
``generate`` and CTranslate2 float32): the ``greedy`` rows time them on the same batches
and count the sentences whose translations agree with the course's.

Rows (each with both engines' BLEU, the sentences they translate alike and the CPU):
``ours`` and ``reference`` in seconds for the whole split, ``ratio = reference / ours``
(> 1: ours is faster). First every engine against ``course`` (ours), beam 4 and greedy;
goal for ``generate``: 1.0 (ours at least as fast with the same search), none (0) for the
others, which measure the gap (CTranslate2, see chapter 11) or the gain (``course int8``,
``course fast``, ``course compiled``: a ratio below 1 is their speed-up). Then
:data:`VERSUS`, a course engine as ours against its production counterpart: ``course int8``
against CTranslate2 int8 (goal 0.8, beam 4 and greedy), ``course fast`` and ``course
compiled`` greedy against ``generate`` (goal 1.0), and ``course compiled`` against
CTranslate2 float32 (no goal: the gap that compiling leaves). Last, measured after
everything else: ``course fast`` greedy over the split after CTranslate2 float32 has
translated one batch in this process, against the same before it (below 1: slowed down;
two passes each, their mean compared, each pass kept in the row).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from _common import CLOCKS, write_json  # benchmarks/_common.py
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from transformer_book.course.cache import chapter10_dir, load_completed, train_chapter10_model
from transformer_book.data import load_multi30k
from transformer_book.data.tokenizer import EOS_ID as EOS
from transformer_book.data.tokenizer import PAD_ID as PAD
from transformer_book.inference import encode_sources, load_trained, score_corpus, translate_ids
from transformer_book.inference.beam import Beam
from transformer_book.inference.greedy import Greedy
from transformer_book.inference.quantize import quantize_for_decoding
from transformer_book.interop import ctranslate
from transformer_book.interop.hf_export import export_checkpoint, quiet_transformers
from transformer_book.nn.transformer import Transformer
from transformer_book.util.env import cpu_name, torch_threads
from transformer_book.util.records import command_line, git_commit, hardware_info, utc_timestamp

BATCH = 32  # sentences per batch, for every engine
BEAM, ALPHA, EXTRA = 4, 0.6, 50  # Section 6.1: beam 4, α = 0.6, at most |x| + 50 tokens
QUICK_LIMIT = 48
DEFAULT_LIMIT = None  # the whole val split (1,014 sentences)
# The course's engines, "course" first.
COURSE = ("course", "course fast", "course compiled", "course int8")
ENGINES = (*COURSE, "transformers", "ct2 float32", "ct2 int8")
GREEDY_ONLY = ("course fast", "course compiled")  # greedy search's fast path, eager and compiled
# Per search: its beam size and the engines that decode it.
SEARCHES = {"beam": (BEAM, tuple(e for e in ENGINES if e not in GREEDY_ONLY)),
            "greedy": (1, ENGINES)}
# A course engine as ours against a production engine: (ours, reference, goal).
VERSUS = (("course int8", "ct2 int8", 0.8), ("course fast", "transformers", 1.0),
          ("course compiled", "transformers", 1.0), ("course compiled", "ct2 float32", 0.0))
LABELS = {"course": "course", "course fast": "course fast",
          "course compiled": "course compiled", "course int8": "course int8",
          "transformers": "transformers generate", "ct2 float32": "CTranslate2 float32",
          "ct2 int8": "CTranslate2 int8"}  # the engines' names in the rows

# (batch of id lists, beam) -> (ids, seconds the engine took by the benchmark's clock)
Decode = Callable[[list[list[int]], int], tuple[list[list[int]], float]]


def _batches(sources: Sequence[Sequence[int]]) -> list[list[int]]:
    """Indices of ``sources`` sorted by length, in chunks of :data:`BATCH`."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    return [order[i:i + BATCH] for i in range(0, len(order), BATCH)]


def _strip(row: list[int]) -> list[int]:
    """A ``generate`` output row as the course returns it: no start token, cut at the first
    ``<eos>``, no padding."""
    row = row[1:]
    row = row[: row.index(EOS)] if EOS in row else row
    return [t for t in row if t != PAD]


def _timed(decode: Callable[[list[list[int]], int], list[list[int]]], clock: str) -> Decode:
    """``decode`` timed around each call, here."""
    now = CLOCKS[clock]

    def timed(batch: list[list[int]], beam: int) -> tuple[list[list[int]], float]:
        start = now()
        ids = decode(batch, beam)
        return ids, now() - start
    return timed


def _engines(checkpoint: Path, folder: Path, ct2: dict[str, ctranslate.TranslatorProcess],
             clock: str) -> dict[str, Decode]:
    """Each engine of :data:`ENGINES` as a :data:`Decode`, on the same weights: the course's
    and ``generate`` timed here, CTranslate2's in the processes of ``ct2`` (by compute
    type), timed there (the CPU clock here would not see their work)."""
    trained = load_trained(checkpoint)
    max_len = trained.model_config.max_len
    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(folder / "hf")
        hf = AutoModelForSeq2SeqLM.from_pretrained(folder / "hf").eval()

    def cap(batch: list[list[int]]) -> int:
        return min(max(len(s) for s in batch) + EXTRA, max_len - 1)

    def course(model: Transformer, fast: bool = False, compiled: bool = False) -> Decode:
        def decode(batch: list[list[int]], beam: int) -> list[list[int]]:
            assert beam == 1 or not fast, "the fast path decodes greedy search only (SEARCHES)"
            strategy = Greedy() if fast else Beam(beam_size=beam, alpha=ALPHA)
            cache = ("compiled" if compiled else "static") if fast else "growing"
            return translate_ids(model, batch, strategy, max_len_a=0.0, max_len_b=cap(batch),
                                 cache=cache)
        return _timed(decode, clock)

    @torch.no_grad()
    def transformers_generate(batch: list[list[int]], beam: int) -> list[list[int]]:
        padded = tokenizer.pad({"input_ids": batch}, return_tensors="pt")
        penalty = {"length_penalty": ALPHA} if beam > 1 else {}
        out = hf.generate(**padded, num_beams=beam, do_sample=False,
                          max_length=cap(batch) + 1, **penalty)  # + 1: the start token
        return [_strip(row) for row in out.tolist()]

    def ct2_engine(kind: str) -> Decode:
        def decode(batch: list[list[int]], beam: int) -> tuple[list[list[int]], float]:
            ids = ct2[kind].translate_ids(batch, beam_size=beam, alpha=ALPHA,
                                          max_len=cap(batch) + 1)
            return ids, ct2[kind].seconds[clock]
        return decode

    return {"course": course(trained.model), "course fast": course(trained.model, fast=True),
            "course compiled": course(trained.model, fast=True, compiled=True),
            "course int8": course(quantize_for_decoding(trained.model)),
            "transformers": _timed(transformers_generate, clock),
            "ct2 float32": ct2_engine("float32"), "ct2 int8": ct2_engine("int8")}


def _decode_all(engines: dict[str, Decode], sources: list[list[int]], beam: int
                ) -> tuple[dict[str, float], dict[str, float], dict[str, list[list[int]]]]:
    """Every engine over every batch, batch by batch in rotating order, after a warmup batch
    each: (seconds, warmup seconds, outputs) per engine."""
    batches = _batches(sources)
    names = list(engines)
    warmup = {}
    for name in names:  # warmup: one batch, apart (compiling, for the compiled engine)
        _, warmup[name] = engines[name]([sources[i] for i in batches[0]], beam)
    seconds = dict.fromkeys(names, 0.0)
    outputs: dict[str, list[list[int]]] = {name: [[] for _ in sources] for name in names}
    for b, batch in enumerate(batches):
        ids = [sources[i] for i in batch]
        for name in names[b % len(names):] + names[:b % len(names)]:
            hyps, spent = engines[name](ids, beam)
            seconds[name] += spent
            for i, hyp in zip(batch, hyps, strict=True):
                outputs[name][i] = hyp
    return seconds, warmup, outputs


def _summary(name: str, seconds: float, warmup: float, outputs: dict[str, list[list[int]]],
             decode: Callable[[list[int]], str], references: list[str]) -> dict[str, Any]:
    """Engine ``name``'s seconds (timed, and its warmup batch's), sacreBLEU and ``same_as``:
    for each course engine that decoded the same search, the sentences ``name`` translates
    exactly as it does."""
    return {"seconds": seconds, "warmup_seconds": warmup,
            "bleu": score_corpus([decode(h) for h in outputs[name]], references,
                                 other_metrics=False).bleu,
            "same_as": {course: sum(a == b for a, b in zip(outputs[name], outputs[course],
                                                           strict=True))
                        for course in COURSE if course in outputs}}


def _prepare(folder: Path, quick: bool) -> Path | None:
    """Chapter 10's run (trained if missing, except in a quick run), exported and
    converted into ``folder``; ``None`` (with a note) when a quick run finds no model."""
    run = load_completed(chapter10_dir("cpu"))
    if run is None and quick:
        print(f"bench_engines: no chapter 10 model in {chapter10_dir('cpu')} (a quick run does "
              "not train it); left out", file=sys.stderr)
        return None
    run = run or train_chapter10_model("cpu")
    export_checkpoint(run.final_checkpoint, folder / "hf")
    ctranslate.convert(folder / "hf", folder / "ct2")
    return Path(run.final_checkpoint)


def measure_engines(limit: int | None = DEFAULT_LIMIT, threads: int = 2, clock: str = "wall",
                    quick: bool = False) -> dict[str, Any] | None:
    """The whole comparison: per search of :data:`SEARCHES` (beam 4, greedy) and per engine
    decoding it, its :func:`_summary`, over the first ``limit`` val pairs."""
    with tempfile.TemporaryDirectory() as tmp, torch_threads(threads):
        checkpoint = _prepare(Path(tmp), quick)
        if checkpoint is None:
            return None
        trained = load_trained(checkpoint)
        pairs = load_multi30k("val", "de", "en")[:limit]
        sources = encode_sources(trained.tokenizer, [s for s, _ in pairs],
                                 trained.model_config.max_len)
        references = [t for _, t in pairs]
        with contextlib.ExitStack() as stack:
            ct2, ct2_trials = _translators(stack, Path(tmp), threads,
                                           [sources[i] for i in _batches(sources)[0]])
            engines, results = _engines(checkpoint, Path(tmp), ct2, clock), {}
            for search, (beam, names) in SEARCHES.items():
                seconds, warmup, outputs = _decode_all({name: engines[name] for name in names},
                                                       sources, beam)
                results[search] = {name: _summary(name, seconds[name], warmup[name], outputs,
                                                  trained.tokenizer.decode, references)
                                   for name in names}
        # Last: it leaves CTranslate2's runtime in this process.
        results["interference"] = _interference(engines["course fast"], sources, Path(tmp),
                                                threads)
    return {"checkpoint": str(checkpoint), "sentences": len(pairs), "threads": threads,
            "ct2_trials": ct2_trials, "clock": clock,
            "batch": BATCH, "alpha": ALPHA, "cpu": cpu_name(), **results}


def _translators(stack: contextlib.ExitStack, folder: Path, threads: int,
                 batch: list[list[int]]) -> tuple[dict[str, ctranslate.TranslatorProcess],
                                                  dict[str, dict[int, float]]]:
    """Per compute type, CTranslate2 in a process of its own (closed with ``stack``) on the
    thread count, 1 or ``threads``, that decodes ``batch`` faster (greedy search, the best of
    two runs): the peer at its best on this machine, not ours. Returns the processes and,
    per compute type, the seconds of each thread count."""
    chosen, trials = {}, {}
    for kind in ctranslate.COMPUTE_TYPES:
        processes, trials[kind] = {}, {}
        for count in sorted({1, threads}):
            processes[count] = stack.enter_context(ctranslate.TranslatorProcess(
                folder / "ct2", folder / "hf", kind, count))
            seconds = []
            for _ in range(2):
                processes[count].translate_ids(batch, max_len=max(map(len, batch)) + EXTRA + 1)
                seconds.append(processes[count].seconds["wall"])
            trials[kind][count] = min(seconds)
        chosen[kind] = processes.pop(_fastest(trials[kind]))
        for process in processes.values():
            process.close()
    return chosen, trials


def _fastest(trial: dict[int, float]) -> int:
    """The thread count of the fewest seconds in ``trial``."""
    return min(trial, key=trial.__getitem__)


def _interference(decode: Decode, sources: list[list[int]], folder: Path, threads: int
                  ) -> dict[str, list[float]]:
    """Why CTranslate2 runs apart: ``decode`` (the course's greedy fast path) over every
    batch, twice, then twice again after CTranslate2 float32 has translated one batch in
    this process (left there: measured last): the seconds of each pass, ``before`` and
    ``after`` (the two passes of a side show the drift that is not CTranslate2's)."""
    def total() -> float:
        return sum(decode([sources[i] for i in batch], 1)[1] for batch in _batches(sources))

    before = [total(), total()]
    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(folder / "hf")
    here = ctranslate.load_translator(folder / "ct2", "float32", threads)
    ctranslate.translate_ids(here, tokenizer, [sources[i] for i in _batches(sources)[0]])
    return {"before": before, "after": [total(), total()]}


def _row(measured: dict[str, Any], search: str, ours: str, reference: str, goal: float
         ) -> dict[str, Any]:
    """Engine ``ours`` against engine ``reference`` in ``search``: ``ratio`` = reference
    seconds / ours, with both BLEU, the sentences they translate alike, ours' warmup and
    the reference's threads (CTranslate2's chosen count, :func:`_translators`)."""
    mine, other = measured[search][ours], measured[search][reference]
    kind = reference.removeprefix("ct2 ")  # a compute type, for CTranslate2's engines
    trials = measured.get("ct2_trials", {}).get(kind)
    label = f"beam {BEAM}" if search == "beam" else "greedy"
    return {"name": f"val {label}, {LABELS[ours]} vs {LABELS[reference]}, "
                    f"{measured['sentences']} sentences, {measured['threads']} threads",
            "unit": "s", "ours": mine["seconds"], "reference": other["seconds"],
            "ratio": other["seconds"] / mine["seconds"], "goal": goal,
            "warmup_ours": mine["warmup_seconds"],
            "threads_reference": measured["threads"] if trials is None else _fastest(trials),
            "reference_thread_trials": trials,
            "bleu_ours": mine["bleu"], "bleu_reference": other["bleu"],
            "same_translations": other["same_as"][ours], "cpu": measured["cpu"]}


def rows(measured: dict[str, Any]) -> list[dict]:
    """``run_all``'s rows, per search: each engine against the course (goal 1.0 for
    ``generate``, 0 for the others), then the pairs of :data:`VERSUS` it decoded."""
    out = []
    for search in SEARCHES:
        engines = measured[search]
        out += [_row(measured, search, "course", name, 1.0 if name == "transformers" else 0.0)
                for name in engines if name != "course"]
        out += [_row(measured, search, ours, reference, goal)
                for ours, reference, goal in VERSUS if ours in engines]
    if "interference" in measured:
        passes = measured["interference"]
        before, after = (sum(passes[side]) / len(passes[side]) for side in ("before", "after"))
        out.append({"name": f"val greedy, course fast after CTranslate2 ran in its process vs "
                            f"before, {measured['sentences']} sentences, "
                            f"{measured['threads']} threads",
                    "unit": "s", "ours": after, "reference": before, "ratio": before / after,
                    "goal": 0.0, "passes_before": passes["before"],
                    "passes_after": passes["after"], "cpu": measured["cpu"]})
    return out


def format_table(measured: dict[str, Any]) -> str:
    """The engines side by side (seconds, speed against the course, BLEU, sentences
    translated as the course does), then the rows that have a goal."""
    ct2_threads = ", ".join(f"{kind} {_fastest(trial)}" for kind, trial in
                            measured.get("ct2_trials", {}).items())
    lines = [f"{measured['sentences']} val sentences, {measured['threads']} threads "
             f"(CTranslate2: {ct2_threads or 'the same'}), {measured['cpu']}",
             f"{'engine':<16} {'search':<7} {'seconds':>8} {'course/x':>9} {'BLEU':>6} "
             f"{'= course':>9} {'warmup s':>9}"]
    for search in SEARCHES:
        course = measured[search]["course"]["seconds"]
        for name, m in measured[search].items():
            lines.append(f"{name:<16} {search:<7} {m['seconds']:>8.2f} "
                         f"{course / m['seconds']:>8.2f}x {m['bleu']:>6.2f} "
                         f"{m['same_as']['course']:>9} {m['warmup_seconds']:>9.2f}")
    lines.append("goals (ratio = reference seconds / ours):")
    lines += [f"  {r['name']}: {r['ratio']:.2f} (goal {r['goal']:g}, "
              f"{'met' if r['ratio'] >= r['goal'] else 'missed'}), "
              f"{r['same_translations']} translated alike"
              for r in rows(measured) if r["goal"] > 0]
    return "\n".join(lines)


def run(quick: bool = False, clock: str = "wall", limit: int | None = DEFAULT_LIMIT,
        threads: int = 2) -> list[dict]:
    """What ``run_all.py`` calls: the comparison (``QUICK_LIMIT`` sentences when quick),
    its table printed, its rows returned (none when a quick run finds no model)."""
    measured = measure_engines(QUICK_LIMIT if quick else limit, threads, clock, quick)
    if measured is None:
        return []
    print(format_table(measured))
    return rows(measured)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_LIMIT} sentences")
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT,
                        help="only the first N val sentences (default: all)")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads (default 2)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    parser.add_argument("--results", type=Path, default=None,
                        help="write <results>/engines-<UTC>.json")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    found = run(args.quick, args.clock, args.limit, args.threads)
    record = {"kind": "engines", "command": command_line(["python", "benchmarks/bench_engines.py",
                                                          *(sys.argv[1:] if argv is None
                                                            else argv)]),
              "git": git_commit(), "hardware": hardware_info("cpu"),
              "wall_seconds": time.perf_counter() - started, "rows": found}
    if args.json is not None:
        write_json(found, args.json)
    if args.results is not None and found:
        print(f"record: {write_json(record, args.results / f'engines-{utc_timestamp()}.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
