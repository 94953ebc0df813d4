"""Decoding against production engines: the course's beam search, ``transformers``'
``generate`` and CTranslate2 (float32 and int8), on the same weights over Multi30k's val split.

Usage: ``python benchmarks/bench_engines.py [--quick] [--limit N] [--threads 2]
[--results results] [--json PATH]``; ``make bench`` runs it through ``run_all.py``.

The weights are chapter 10's model (:func:`transformer_book.course.cache.train_chapter10_model`:
trained first, about 5 minutes, when the course cache lacks it), exported with
``transformer-book export``'s code (:func:`~transformer_book.interop.hf_export.export_checkpoint`)
and converted for CTranslate2 (:func:`~transformer_book.interop.ctranslate.convert`). Every
engine decodes the same length-sorted batches of ``BATCH`` val sentences with beam 4 and
α = 0.6, and at most ``|x| + 50`` tokens (Section 6.1) for the batch's longest source ``x``
(``generate`` and CTranslate2 take one limit per batch, so the course gets it too), on
``--threads`` intra-op threads (2 by default: the course machine's cores). The batches are
timed in turn, the engines' order rotating from batch to batch, so that a change in the
machine's load falls on all of them alike; each engine first decodes one batch untimed.

Not equal, by design: the length penalty. The course divides a hypothesis' log-probability
by Wu et al.'s ``((5 + |Y|) / 6)^α`` and stops a sentence when no live hypothesis can still
beat its best finished one; ``generate`` and CTranslate2 divide by ``|Y|^α`` and stop by
their own rules. So the beam-4 translations differ a little, and each engine's sacreBLEU is
reported. Greedy search is exactly the same model in all of them (the tests prove it for
``generate`` and CTranslate2 float32): the ``greedy`` row times the three on the same batches
and counts the sentences whose translations agree with the course's.

Rows: ``ours`` and ``reference`` in seconds for the whole split, ``ratio = reference / ours``
(> 1: the course is faster). Goal for ``generate``: 1.0 (ours at least as fast with the same
search, beam 4 or greedy). The CTranslate2 rows have no goal (0): they measure the gap (see
chapter 11).
"""

from __future__ import annotations

import argparse
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
from transformer_book.inference.decoding import Beam
from transformer_book.interop import ctranslate
from transformer_book.interop.hf_export import export_checkpoint, quiet_transformers
from transformer_book.util.env import cpu_name, torch_threads
from transformer_book.util.records import command_line, git_commit, hardware_info, utc_timestamp

BATCH = 32  # sentences per batch, for every engine
BEAM, ALPHA, EXTRA = 4, 0.6, 50  # Section 6.1: beam 4, α = 0.6, at most |x| + 50 tokens
QUICK_LIMIT = 48
DEFAULT_LIMIT = None  # the whole val split (1,014 sentences)
ENGINES = ("course", "transformers", "ct2 float32", "ct2 int8")


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


def _engines(checkpoint: Path, folder: Path, threads: int
             ) -> dict[str, Callable[[list[list[int]], int], list[list[int]]]]:
    """Each engine as ``decode(batch of id lists, beam) -> id lists``, on the same weights."""
    trained = load_trained(checkpoint)
    max_len = trained.model_config.max_len
    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(folder / "hf")
        hf = AutoModelForSeq2SeqLM.from_pretrained(folder / "hf").eval()
    ct2 = {kind: ctranslate.load_translator(folder / "ct2", kind, threads)
           for kind in ctranslate.COMPUTE_TYPES}

    def cap(batch: list[list[int]]) -> int:
        return min(max(len(s) for s in batch) + EXTRA, max_len - 1)

    def course(batch, beam):
        return translate_ids(trained.model, batch, Beam(beam_size=beam, alpha=ALPHA),
                             max_len_a=0.0, max_len_b=cap(batch))

    @torch.no_grad()
    def transformers_generate(batch, beam):
        padded = tokenizer.pad({"input_ids": batch}, return_tensors="pt")
        penalty = {"length_penalty": ALPHA} if beam > 1 else {}
        out = hf.generate(**padded, num_beams=beam, do_sample=False,
                          max_length=cap(batch) + 1, **penalty)  # + 1: the start token
        return [_strip(row) for row in out.tolist()]

    def ct2_engine(kind):
        return lambda batch, beam: ctranslate.translate_ids(
            ct2[kind], tokenizer, batch, beam_size=beam, alpha=ALPHA, max_len=cap(batch) + 1)

    return {"course": course, "transformers": transformers_generate,
            "ct2 float32": ct2_engine("float32"), "ct2 int8": ct2_engine("int8")}


def _decode_all(engines: dict[str, Callable], sources: list[list[int]], beam: int, clock: str
                ) -> tuple[dict[str, float], dict[str, list[list[int]]]]:
    """Every engine over every batch, timed batch by batch in rotating order."""
    now = CLOCKS[clock]
    batches = _batches(sources)
    names = list(engines)
    for name in names:  # warmup: one batch, untimed
        engines[name]([sources[i] for i in batches[0]], beam)
    seconds = dict.fromkeys(names, 0.0)
    outputs: dict[str, list[list[int]]] = {name: [[] for _ in sources] for name in names}
    for b, batch in enumerate(batches):
        ids = [sources[i] for i in batch]
        for name in names[b % len(names):] + names[:b % len(names)]:
            start = now()
            hyps = engines[name](ids, beam)
            seconds[name] += now() - start
            for i, hyp in zip(batch, hyps, strict=True):
                outputs[name][i] = hyp
    return seconds, outputs


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
    """The whole comparison: per engine its seconds, BLEU and translations' agreement with
    the course's, for beam 4 and for greedy search, over the first ``limit`` val pairs."""
    with tempfile.TemporaryDirectory() as tmp, torch_threads(threads):
        checkpoint = _prepare(Path(tmp), quick)
        if checkpoint is None:
            return None
        trained = load_trained(checkpoint)
        pairs = load_multi30k("val", "de", "en")[:limit]
        sources = encode_sources(trained.tokenizer, [s for s, _ in pairs],
                                 trained.model_config.max_len)
        engines, results = _engines(checkpoint, Path(tmp), threads), {}
        for beam in (BEAM, 1):
            seconds, outputs = _decode_all(engines, sources, beam, clock)
            results[beam] = {name: {
                "seconds": seconds[name],
                "bleu": score_corpus([trained.tokenizer.decode(h) for h in outputs[name]],
                                     [t for _, t in pairs], other_metrics=False).bleu,
                "same_as_course": sum(a == b for a, b in zip(outputs[name], outputs["course"],
                                                             strict=True)),
            } for name in engines}
    return {"checkpoint": str(checkpoint), "sentences": len(pairs), "threads": threads,
            "clock": clock, "batch": BATCH, "alpha": ALPHA, "cpu": cpu_name(),
            "beam": results[BEAM], "greedy": results[1]}


def rows(measured: dict[str, Any]) -> list[dict]:
    """``run_all``'s rows: each engine against the course, for beam 4 and greedy."""
    out = []
    for search, label in (("beam", f"beam {BEAM}"), ("greedy", "greedy")):
        course = measured[search]["course"]
        for name in ENGINES[1:]:
            other = measured[search][name]
            engine = "transformers generate" if name == "transformers" else f"CTranslate2 " \
                f"{name.split()[1]}"
            out.append({
                "name": f"val {label}, course vs {engine}, {measured['sentences']} sentences, "
                        f"{measured['threads']} threads",
                "unit": "s", "ours": course["seconds"], "reference": other["seconds"],
                "ratio": other["seconds"] / course["seconds"],
                "goal": 1.0 if name == "transformers" else 0.0,
                "bleu_ours": course["bleu"], "bleu_reference": other["bleu"],
                "same_translations": other["same_as_course"], "cpu": measured["cpu"]})
    return out


def format_table(measured: dict[str, Any]) -> str:
    """The engines side by side: seconds, speed against the course, BLEU, agreement."""
    lines = [f"{measured['sentences']} val sentences, {measured['threads']} threads, "
             f"{measured['cpu']}",
             f"{'engine':<14} {'search':<7} {'seconds':>8} {'course/x':>9} {'BLEU':>6} "
             f"{'= course':>9}"]
    for search in ("beam", "greedy"):
        course = measured[search]["course"]["seconds"]
        for name in ENGINES:
            m = measured[search][name]
            lines.append(f"{name:<14} {search:<7} {m['seconds']:>8.2f} "
                         f"{course / m['seconds']:>8.2f}x {m['bleu']:>6.2f} "
                         f"{m['same_as_course']:>9}")
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
