"""Evaluating a trained model, in one place: decode, score, resample (Sections 6.1-6.2).

:func:`evaluate` translates source sentences (given, or a split of the run's dataset) with a
loaded model through :func:`~transformer_book.inference.translate.translate`, scores the
translations with sacreBLEU (:func:`~transformer_book.inference.scoring.score_corpus`: BLEU,
chrF++ and TER, each with its signature) and draws a bootstrap interval of BLEU and chrF++
(:func:`~transformer_book.inference.significance.bootstrap_interval`: 95%, ``resamples``
corpora drawn with seed ``seed``, by default 1000 and 12345). It returns one
:class:`Evaluation`: the scores, the intervals, the sources, references and hypotheses, and
how they were decoded (:class:`Decoding`).

Every evaluation of the package goes through it: the CLI's ``evaluate``, the protocol
scripts (``scripts/cpu_protocol.py``, ``scripts/gpu_run.py``), the greedy validation BLEU
of training (:func:`~transformer_book.train.validate.validation_bleu`) and the ablations.
:func:`evaluation_record` and :func:`write_evaluation` turn an evaluation into the JSON
record ``transformer-book evaluate`` writes into ``results/``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_book.data.corpora import corpus_split, load_corpus
from transformer_book.inference.decoding import strategy_name, strategy_settings
from transformer_book.inference.generate import StepRule
from transformer_book.inference.scoring import CorpusScores, check_texts, score_corpus
from transformer_book.inference.significance import bootstrap_interval
from transformer_book.inference.trained import TrainedModel
from transformer_book.inference.translate import choose_strategy, translate
from transformer_book.util.records import command_line, git_commit, hardware_info, write_record
from transformer_book.util.timing import Stopwatch
from transformer_book.util.validation import (
    require,
    require_bool,
    require_int,
    require_positive_int,
)

__all__ = ["BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "Decoding", "Evaluation", "evaluate",
           "evaluation_record", "write_evaluation"]

#: The bootstrap interval's resampled corpora and the seed that draws them (the defaults of
#: :func:`~transformer_book.inference.significance.bootstrap_interval` and sacreBLEU's).
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 12345
#: The coverage of the interval.
BOOTSTRAP_LEVEL = 0.95


@dataclass(frozen=True)
class Decoding:
    """How the hypotheses were decoded (Section 6.1: beam 4, α = 0.6, length |x| + 50).

    Fields: ``strategy`` (its registered name, :func:`~.decoding.strategy_name`),
    ``settings`` (the strategy's, by name: beam search's ``beam_size``, ``alpha`` and
    ``stop``), ``max_len_a`` and ``max_len_b`` (each output has at most ``max_len_a · |x|
    + max_len_b`` tokens) and ``cache`` (the decoder's key/value cache: the same tokens).
    """

    strategy: str
    settings: dict[str, Any]
    max_len_a: float
    max_len_b: int
    cache: str = "growing"

    def to_dict(self) -> dict[str, Any]:
        """The record's ``decoding``: the strategy's name, its settings, the lengths."""
        return {"strategy": self.strategy, **self.settings, "max_len_a": self.max_len_a,
                "max_len_b": self.max_len_b, "cache": self.cache}


@dataclass(frozen=True)
class Evaluation:
    """A model's translations of N sentences and their scores.

    Fields:
        scores: BLEU (cased ``13a``, and lowercased ``intl``), chrF++ and TER with their
            sacreBLEU signatures (chrF++ and TER ``None`` when not asked for).
        bleu_interval / chrf_interval: the 95% percentile-bootstrap interval of BLEU and of
            chrF++, ``(low, high)``; ``None`` when not computed.
        resamples / seed: the bootstrap's resampled corpora and seed (``None`` without).
        sources / references / hypotheses: the N sentences, aligned.
        split: the split of the run's dataset they came from (``None`` for texts given directly);
        limit: the first how many of it (``None``: all).
        decoding: how the hypotheses were decoded.
        decode_seconds: the wall time of the translation alone.
    """

    scores: CorpusScores
    bleu_interval: tuple[float, float] | None
    chrf_interval: tuple[float, float] | None
    resamples: int | None
    seed: int | None
    sources: list[str]
    references: list[str]
    hypotheses: list[str]
    split: str | None
    limit: int | None
    decoding: Decoding
    decode_seconds: float

    def __str__(self) -> str:
        interval = ""
        if self.bleu_interval is not None:
            low, high = self.bleu_interval
            interval = (f" | BLEU 95% bootstrap [{low:.2f}, {high:.2f}] "
                        f"({self.resamples} resamples, seed {self.seed})")
        return f"{self.scores}{interval}"


def _texts(trained: TrainedModel, sources: Sequence[str] | None,
           references: Sequence[str] | None, split: str | None, limit: int | None
           ) -> tuple[list[str], list[str]]:
    """The aligned sources and references: given, or the first ``limit`` pairs of
    ``split`` in the run's languages and data folder."""
    if limit is not None:
        require_positive_int(limit, "limit")
    if split is not None:
        require(sources is None and references is None, "split",
                "either a split or sources and references, not both",
                f"split={split!r} and texts")
        data = trained.run_config.data
        generic = corpus_split(data.dataset, split)  # Multi30k's "val" is "valid"
        pairs = load_corpus(data.dataset, generic, data.src, data.tgt, data.data_dir)[:limit]
        return [s for s, _ in pairs], [t for _, t in pairs]
    require(sources is not None and references is not None, "sources",
            "sources and references (or a split)",
            "no sources" if sources is None else "no references")
    assert sources is not None and references is not None, "checked just above"
    sources, references = check_texts(sources, "sources"), check_texts(references, "references")
    require(len(references) == len(sources), "references",
            f"{len(sources)} sentences (one per source)", len(references))
    return sources[:limit], references[:limit]


def evaluate(
    trained: TrainedModel,
    sources: Sequence[str] | None = None,
    references: Sequence[str] | None = None,
    *,
    split: str | None = None,
    limit: int | None = None,
    strategy: str | StepRule | None = None,
    cache: str = "growing",
    max_tokens: int = 4096,
    other_metrics: bool = True,
    resamples: int | None = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    progress: bool = False,
    **settings: Any,
) -> Evaluation:
    """Translate, score with sacreBLEU and bootstrap: a model's :class:`Evaluation`.

    Args:
        trained: a loaded model (:func:`~transformer_book.inference.trained.load_trained`;
            training builds one around the model it trains).
        sources / references: N source sentences and their N reference translations; or
        split: a split of the run's dataset by its own name (Multi30k: ``"val"``,
            ``"test_2016_flickr"``; parallel text: ``"valid"``, ``"test"``), in the run
            config's languages and folder.
        limit: only the first ``limit`` sentences.
        strategy / settings: how to decode
            (:func:`~transformer_book.inference.translate.choose_strategy`: by default the
            run config's ``[decode]``, beam 4 and α = 0.6; ``beam_size=1`` is greedy
            search; ``strategy="greedy"``, ``"sample"`` or any registered one, or a step
            rule). cache: the decoder's key/value cache (the same translations).
        max_tokens: source tokens decoded together at most.
        other_metrics: also chrF++ and TER (default); ``False`` scores BLEU alone, the
            cheap check during training.
        resamples: corpora of the bootstrap interval (>= 100), drawn with ``seed``;
            ``None``: no interval.
        progress: show a tqdm bar of the sentences decoded, with its rate and time left (on
            stderr outside a notebook; default off). It changes no result.

    Returns:
        An :class:`Evaluation`. An interval of chrF++ only comes with ``other_metrics``.
    """
    require_bool(other_metrics, "other_metrics")
    require_bool(progress, "progress")
    if resamples is not None:
        require_int(resamples, "resamples", minimum=100)
    chosen = choose_strategy(trained, strategy, **settings)
    sources, references = _texts(trained, sources, references, split, limit)
    dec = trained.run_config.decode
    argument = "sources" if split is None else f"{split} sentences"
    with Stopwatch() as decoding:
        hypotheses = translate(trained, sources, chosen, max_tokens=max_tokens, cache=cache,
                               argument=argument, progress=progress)
    scores = score_corpus(hypotheses, references, other_metrics=other_metrics)
    bleu_interval = chrf_interval = None
    if resamples is not None:
        bleu_interval = bootstrap_interval(hypotheses, references, "bleu", resamples, seed,
                                           BOOTSTRAP_LEVEL)
        if other_metrics:
            chrf_interval = bootstrap_interval(hypotheses, references, "chrf", resamples, seed,
                                               BOOTSTRAP_LEVEL)
    return Evaluation(
        scores=scores, bleu_interval=bleu_interval, chrf_interval=chrf_interval,
        resamples=resamples, seed=None if resamples is None else seed,
        sources=sources, references=references, hypotheses=hypotheses,
        split=split, limit=limit,
        decoding=Decoding(strategy=strategy_name(chosen), settings=strategy_settings(chosen),
                          max_len_a=dec.max_len_a, max_len_b=dec.max_len_b, cache=cache),
        decode_seconds=decoding.seconds)


def evaluation_record(evaluation: Evaluation, trained: TrainedModel,
                      command: Sequence[str] | None = None) -> dict[str, Any]:
    """What ``transformer-book evaluate`` writes into ``results/``: the command, the
    machine, the checkpoints and why (``selection``), the decoding settings, the scores
    (BLEU, chrF++, TER) with their signatures and intervals, and the first five
    translations. ``command``: the argument vector (default ``sys.argv``)."""
    data, scores = trained.run_config.data, evaluation.scores
    return {
        "kind": "evaluate", "command": command_line(command), "git": git_commit(),
        "hardware": hardware_info(next(trained.model.parameters()).device),
        # the averaged checkpoints, oldest first; step is the last one's
        "checkpoints": [str(p) for p in trained.checkpoints],
        "averaged": len(trained.checkpoints), "step": trained.step,
        "split": evaluation.split, "languages": f"{data.src}-{data.tgt}",
        "limit": evaluation.limit, "num_hypotheses": len(evaluation.hypotheses),
        "decoding": evaluation.decoding.to_dict(),
        "selection": trained.selection,
        "bleu": scores.bleu, "signature": scores.bleu_signature,
        "bleu_lowercase_intl": scores.bleu_lowercase_intl,
        "lowercase_intl_signature": scores.bleu_lowercase_intl_signature,
        "chrf": scores.chrf, "chrf_signature": scores.chrf_signature,
        "ter": scores.ter, "ter_signature": scores.ter_signature,
        "precisions": list(scores.precisions), "brevity_penalty": scores.brevity_penalty,
        "hyp_len": scores.hyp_len, "ref_len": scores.ref_len,
        "bleu_95": None if evaluation.bleu_interval is None else list(evaluation.bleu_interval),
        "chrf_95": None if evaluation.chrf_interval is None else list(evaluation.chrf_interval),
        "bootstrap": {"resamples": evaluation.resamples, "seed": evaluation.seed},
        "examples": [
            {"source": s, "reference": t, "hypothesis": h}
            for s, t, h in list(zip(evaluation.sources, evaluation.references,
                                    evaluation.hypotheses, strict=True))[:5]
        ],
        "model_config": trained.model_config.to_dict(),
        "decode_seconds": evaluation.decode_seconds,
    }


def write_evaluation(results_dir: str | Path, evaluation: Evaluation, trained: TrainedModel,
                     command: Sequence[str] | None = None,
                     wall_seconds: float | None = None) -> Path:
    """Write :func:`evaluation_record` (with ``wall_seconds``, loading included, if given)
    as ``results_dir/evaluate-<run folder>-<split>-<time>.json``; returns its path."""
    record = evaluation_record(evaluation, trained, command)
    record["wall_seconds"] = wall_seconds
    run_name = trained.checkpoints[-1].parent.name if trained.checkpoints else "model"
    return write_record(results_dir, "evaluate", f"{run_name}-{evaluation.split or 'texts'}",
                        record)
