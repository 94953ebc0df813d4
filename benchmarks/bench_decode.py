"""Speed of decoding: greedy with the KV cache against without it; beam search against greedy.

Usage: ``python benchmarks/bench_decode.py [--quick] [--json PATH]``.

The small preset (d_model 256, 3 + 3 layers, vocab 8000) with random weights, in eval mode.
``min_len = max_len`` forbids ``<eos>`` until the last token, so every sentence runs exactly
the same number of steps (a random model would otherwise stop at random places).

Rows (``ours`` and ``reference`` are seconds per call, ``ratio = reference / ours``):

- ``greedy cache``: greedy decoding of 50 tokens at batch 64, with the cache (ours) vs
  re-running the decoder on the whole prefix each step (reference). Goal: ratio >= 3.
- ``beam4 vs greedy``: beam search (beam 4, α = 0.6, 50 tokens) vs greedy on the same
  batch, both with the cache; here the ratio is greedy / beam, goal >= 1/3 (beam within 3×).
- ``beam4 vs greedy, test_2016_flickr``: the same comparison as a user runs it, with
  ``translate_ids`` over the 1,000 test sentences and a trained model, where each sentence
  stops when it is done (beam search: when no live hypothesis can beat its best finished
  one). Measured twice: on one thread, like every other row, and on torch's default
  threads, as ``transformer-book evaluate`` runs (2 on the course machine). Full size
  only, for each trained model found: chapter 10's (d_model 128, 2 + 2 layers, vocabulary
  4,000), when it is in the course cache (:mod:`transformer_book.course.cache`), and the
  CPU-target run of ``configs/small.toml`` (d_model 256, 3 + 3 layers, vocabulary 8,000),
  when ``transformer-book train --config configs/small.toml`` has left it in ``runs/small``.
  A model that is missing is left out, with a note.

Medians of interleaved repeats after one warmup, on one intra-op thread (the course machine's
2 cores are shared), except the second test_2016_flickr row.
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path

import torch
from _common import command_line, measure, medians, one_thread  # benchmarks/_common.py

from transformer_book.course.cache import chapter10_dir, load_completed
from transformer_book.data import load_multi30k
from transformer_book.data.multi30k import DatasetUnavailableError
from transformer_book.inference import encode_sources, load_trained, translate_ids
from transformer_book.inference.beam import Beam, beam_search
from transformer_book.inference.greedy import Greedy, greedy_decode
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.run import list_checkpoints

VOCAB = 8000
SMALL_RUN = Path(__file__).resolve().parent.parent / "runs" / "small"  # the CPU-target run
FULL = dict(batch=64, beam_batch=16, src_len=20, steps=50, repeats=3)
QUICK = dict(batch=16, beam_batch=4, src_len=12, steps=20, repeats=1)


def run(quick: bool = False, clock: str = "wall") -> list[dict]:
    """The two comparisons at the quick or full size; ``clock="cpu"`` times this process's
    CPU seconds (steadier on a busy machine), ``"wall"`` what a user sees."""
    size = QUICK if quick else FULL
    steps = size["steps"]
    with one_thread():
        torch.manual_seed(0)
        config = TransformerConfig.preset("small", VOCAB, max_len=128)
        model = Transformer(config).eval()
        src = torch.randint(4, VOCAB, (size["batch"], size["src_len"]))
        fixed = dict(max_len_a=0.0, max_len_b=steps, min_len=steps)
        t = medians(measure({
            "cache": lambda: greedy_decode(model, src, cache="growing", **fixed),
            "no cache": lambda: greedy_decode(model, src, cache="none", **fixed),
        }, size["repeats"], clock=clock))
        rows = [{
            "name": f"greedy cache vs no cache, B={size['batch']}, {steps} tokens",
            "unit": "s", "ours": t["cache"], "reference": t["no cache"],
            "ratio": t["no cache"] / t["cache"], "goal": 3.0,
        }]
        small = src[: size["beam_batch"]]
        beam = dict(max_len_a=0.0, max_len_b=steps, min_len=steps)
        t = medians(measure({
            "beam": lambda: beam_search(model, small, beam_size=4, alpha=0.6, **beam),
            "greedy": lambda: greedy_decode(model, small, **fixed),
        }, size["repeats"], clock=clock))
        rows.append({
            "name": f"beam 4 vs greedy, B={size['beam_batch']}, {steps} tokens",
            "unit": "s", "ours": t["beam"], "reference": t["greedy"],
            "ratio": t["greedy"] / t["beam"], "goal": 1 / 3,
        })
    if not quick:
        rows += _test_set_rows(size["repeats"], clock)
    return rows


def _trained_models() -> list[tuple[str, Path]]:
    """``(label, checkpoint or run folder)`` of each trained model there is to measure."""
    models = []
    run = load_completed(chapter10_dir("cpu"))
    if run is None:
        print("bench_decode: the chapter 10 model rows need its model in the course cache "
              f"({chapter10_dir('cpu')}); run chapter 10 first", file=sys.stderr)
    else:
        models.append(("ch10 model", Path(run.final_checkpoint)))
    if list_checkpoints(SMALL_RUN):
        models.append(("small.toml", SMALL_RUN))
    else:
        print(f"bench_decode: the small.toml rows need its run in {SMALL_RUN} (transformer-book "
              "train --config configs/small.toml, about 90 minutes)", file=sys.stderr)
    return models


def _test_set_rows(repeats: int, clock: str) -> list[dict]:
    """Beam 4 against greedy over test_2016_flickr with each trained model found."""
    models = _trained_models()
    if not models:
        return []
    try:
        test_pairs = load_multi30k("test_2016_flickr")
    except DatasetUnavailableError as error:
        print(f"bench_decode: the test_2016_flickr rows are left out: {error}", file=sys.stderr)
        return []
    german = [de for de, _ in test_pairs]
    return [row for label, checkpoint in models
            for row in _beam_vs_greedy(label, checkpoint, german, repeats, clock)]


def _beam_vs_greedy(label: str, checkpoint: Path, german: list[str], repeats: int,
                    clock: str) -> list[dict]:
    """One model's rows: beam 4 against greedy over the ``german`` test sentences, on one
    thread and on torch's default threads (when that is more than one)."""
    trained = load_trained(checkpoint)
    model = trained.model
    sources = encode_sources(trained.tokenizer, german, trained.model_config.max_len)
    calls = {"beam": lambda: translate_ids(model, sources, Beam(beam_size=4, alpha=0.6)),
             "greedy": lambda: translate_ids(model, sources, Greedy())}
    default = torch.get_num_threads()  # on a one-core machine, one thread is the default
    rows = []
    for threads, context in [(1, one_thread)] + ([(default, nullcontext)] if default > 1 else []):
        with context():
            t = medians(measure(calls, repeats, clock=clock))
        rows.append({
            "name": f"beam 4 vs greedy, test_2016_flickr, {label}, {threads} thread"
                    + ("s" if threads > 1 else ""),
            "unit": "s", "ours": t["beam"], "reference": t["greedy"],
            "ratio": t["greedy"] / t["beam"], "goal": 1 / 3,
        })
    return rows


def _print(rows: list[dict]) -> None:
    width = max([len(r['name']) for r in rows] + [10])
    print(f"{'benchmark':<{width}} | {'ours s':>8} {'ref s':>8} | {'ratio':>6} {'goal':>6}")
    for r in rows:
        print(f"{r['name']:<{width}} | {r['ours']:8.3f} {r['reference']:8.3f} | "
              f"{r['ratio']:6.2f} {r['goal']:6.2f}")


main = command_line(__doc__, run, _print)


if __name__ == "__main__":
    main()
