"""Ablations: Table 3 of *Attention Is All You Need* (Vaswani et al., 2017) in miniature.

Section 6.2 (Model Variations): "To evaluate the importance of different components of the
Transformer, we varied our base model in different ways, measuring the change in
performance on English-to-German translation on the development set, newstest2013."

:func:`run_ablation` trains one small Transformer per variant and seed -- the baseline
config with a few fields overridden -- for the same number of steps on the same batches
(the batch order depends only on the seed), then measures the validation loss without label
smoothing (so perplexity is comparable across ε_ls), greedy BLEU and keeps the greedy
translations (for paired significance tests). Several seeds per variant give the spread that
tells a change from noise (:mod:`transformer_book.analysis.ablation_stats` turns it into
verdicts). It is a deliberately small loop for many short runs, made of the package's
pieces: the token-budget sampler, the training step
(:func:`~transformer_book.train.step.train_step`, the loop's own), the validation loss
(:func:`~transformer_book.train.validate.validation_loss`) and training's greedy BLEU
(:func:`~transformer_book.train.validate.validation_bleu`, sacreBLEU through
:func:`~transformer_book.inference.evaluation.evaluate`). Full training runs (checkpoints,
resume, AMP, DDP) are :func:`transformer_book.train.loop.train`.

With ``cache=`` a folder, each finished run is kept there as JSON (:func:`run_key` names
it after everything the run depends on), so executing the experiment again reads the runs
instead of training them.

Row (B) of Table 3 shrinks the key size d_k while h and d_v stay fixed:
:func:`~transformer_book.analysis.keysize.restrict_key_size` (re-exported here) imposes it
on a built model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from transformer_book.analysis.keysize import KeySizeMask, restrict_key_size
from transformer_book.data.batching import TokenBudgetSampler
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer, count_parameters
from transformer_book.run.config import DataSection, RunConfig
from transformer_book.train.corpus import (
    PreparedData,
    check_ids,
    epoch_steps,
    make_step_batch,
    prepare_data,
)
from transformer_book.train.objective import make_optimizer
from transformer_book.train.step import NonFiniteLossError, Trainer, train_step
from transformer_book.train.validate import validation_bleu, validation_loss
from transformer_book.util.env import get_device, set_seed
from transformer_book.util.files import atomic_write_json
from transformer_book.util.results import recorded_results_dir
from transformer_book.util.timing import Stopwatch
from transformer_book.util.validation import (
    bad_input,
    require,
    require_int,
    require_number,
    require_positive_int,
)

__all__ = [
    "EXTRA_KEYS",
    "PAPER_TABLE3",
    "AblationResult",
    "KeySizeMask",
    "VariantRuns",
    "VariantScores",
    "ablation_data",
    "evaluate_variant",
    "recorded_runs",
    "relative_change",
    "restrict_key_size",
    "results_by_name",
    "run_ablation",
    "run_key",
    "train_variant",
]

# Keys a variant may set besides TransformerConfig fields: the reduced key size and the
# variant's own seeds (instead of run_ablation's).
EXTRA_KEYS = ("d_k", "seeds")
# How a variant's greedy BLEU decodes: the default [decode] (outputs of at most |x| + 50).
_DECODING = RunConfig()

# Table 3 of the paper (newstest2013 dev set, base model after 100K steps):
# name -> (perplexity per wordpiece, BLEU). "base": N=6, d_model=512, d_ff=2048, h=8,
# d_k=d_v=64, P_drop=0.1, ε_ls=0.1.
PAPER_TABLE3: dict[str, tuple[float, float]] = {
    "base": (4.92, 25.8),
    "(A) h=1, d_k=d_v=512": (5.29, 24.9),
    "(A) h=4, d_k=d_v=128": (5.00, 25.5),
    "(A) h=16, d_k=d_v=32": (4.91, 25.8),
    "(A) h=32, d_k=d_v=16": (5.01, 25.4),
    "(B) d_k=16": (5.16, 25.1),
    "(B) d_k=32": (5.01, 25.4),
    "(D) P_drop=0.0": (5.77, 24.6),
    "(D) P_drop=0.2": (4.95, 25.5),
    "(D) ε_ls=0.0": (4.67, 25.3),
    "(D) ε_ls=0.2": (5.47, 25.7),
    "(E) learned positions": (4.92, 25.7),
}


# --------------------------------------------------------------------------- data


def ablation_data(
    vocab_size: int = 2000,
    max_len: int = 16,
    train_subset: int | None = None,
    val_sentences: int | None = None,
    data_dir: str | None = None,
) -> PreparedData:
    """Multi30k de -> en with a small joint BPE, only pairs of at most ``max_len`` tokens.

    Section 5.1's data pipeline (:func:`~transformer_book.train.corpus.prepare_data`) at a
    laptop's size: the BPE is trained on the (first ``train_subset``) training pairs, and
    training and validation pairs longer than ``max_len`` BPE tokens are dropped, which keeps
    the short sentences a small model can learn in minutes. The tokenizer file lives in a
    temporary folder; the returned tokenizer is already loaded.
    """
    require_int(vocab_size, "vocab_size", minimum=8)
    require_int(max_len, "max_len", minimum=2)
    run_config = RunConfig(data=DataSection(vocab_size=vocab_size, max_len=max_len,
                                            train_subset=train_subset, data_dir=data_dir))
    with tempfile.TemporaryDirectory(prefix="ablation-bpe-") as folder:
        return prepare_data(run_config, folder, val_sentences=val_sentences)


# --------------------------------------------------------------------------- results


@dataclass
class AblationResult:
    """One trained variant with one seed: its settings, size, training curve and scores.

    ``val_nll`` is the mean negative log-likelihood per target token *without* label
    smoothing (so variants with different ε_ls are comparable), ``val_ppl = exp(val_nll)``
    (the paper's "perplexity per wordpiece"), ``bleu`` the sacreBLEU score of the greedy
    ``translations`` (detokenised) of the first ``bleu_sentences`` validation sentences.
    """

    name: str
    overrides: dict[str, Any]
    seed: int
    num_parameters: int
    steps: int
    train_losses: list[float]
    val_nll: float
    val_ppl: float
    bleu: float
    bleu_sentences: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)
    translations: list[str] = field(default_factory=list)


@dataclass
class VariantRuns:
    """One variant trained once per seed: a row of Table 3 in miniature.

    ``runs`` holds one :class:`AblationResult` per seed, in the order the seeds were given;
    ``val_ppl`` and ``bleu`` list their scores in that order (summarise them with
    :func:`~transformer_book.analysis.ablation_stats.mean_sd`).
    """

    name: str
    overrides: dict[str, Any]
    runs: list[AblationResult]

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.runs]

    @property
    def val_ppl(self) -> list[float]:
        return [r.val_ppl for r in self.runs]

    @property
    def bleu(self) -> list[float]:
        return [r.bleu for r in self.runs]

    @property
    def num_parameters(self) -> int:
        """Parameters that influence the output (the same for every seed)."""
        return self.runs[0].num_parameters

    def run(self, seed: int) -> AblationResult:
        """The run trained with ``seed``."""
        for r in self.runs:
            if r.seed == seed:
                return r
        raise bad_input("seed", f"one of this variant's seeds {self.seeds}", seed)


class VariantScores(NamedTuple):
    """What :func:`evaluate_variant` measures on the validation pairs."""

    val_nll: float
    val_ppl: float
    bleu: float
    translations: list[str]


def relative_change(baseline: float, variant: float) -> float:
    """``(variant - baseline) / baseline``: +0.05 means 5 % higher than the baseline."""
    require_number(baseline, "baseline")
    require_number(variant, "variant")
    require(baseline != 0, "baseline", "a non-zero number", baseline)
    return (variant - baseline) / baseline


# ----------------------------------------------------------------------- training


def evaluate_variant(model: nn.Module, data: PreparedData, *, bleu_sentences: int = 100,
                     max_tokens: int = 4000, device: torch.device | None = None
                     ) -> VariantScores:
    """``(val_nll, val_ppl, bleu, translations)`` of ``model`` on ``data``'s validation pairs.

    The loss is plain cross-entropy per target token (ε_ls = 0, padding ignored), summed
    over all validation pairs and divided by their token count
    (:func:`~transformer_book.train.validate.validation_loss`); BLEU decodes the first
    ``bleu_sentences`` sources greedily (at most |x| + 50 tokens each, as during training),
    detokenises them (``translations``, aligned with ``data.val_references``) and scores
    them with sacreBLEU (0 sentences: no BLEU, reported as NaN, no translations).
    """
    require_int(bleu_sentences, "bleu_sentences", minimum=0)
    device = device if device is not None else next(model.parameters()).device
    losses = validation_loss(model, data.val_src, data.val_tgt, label_smoothing=0.0,
                             max_tokens=max_tokens, device=device)
    n = min(bleu_sentences, len(data.val_src))
    if n == 0:
        return VariantScores(losses.nll, losses.perplexity, float("nan"), [])
    greedy = validation_bleu(model, data, n, run_config=_DECODING, max_tokens=max_tokens)
    return VariantScores(losses.nll, losses.perplexity, greedy.scores.bleu, greedy.hypotheses)


def train_variant(
    config: TransformerConfig,
    data: PreparedData,
    *,
    steps: int,
    seed: int = 0,
    d_k: int | None = None,
    max_tokens: int = 1000,
    warmup_steps: int = 100,
    lr_factor: float = 1.0,
    clip_norm: float | None = 1.0,
    bleu_sentences: int = 100,
    device: torch.device | str | None = None,
    name: str = "variant",
    overrides: Mapping[str, Any] | None = None,
) -> AblationResult:
    """Train one Transformer for ``steps`` optimizer steps, then evaluate it.

    Section 5: token-budget batches of at most ``max_tokens`` padded tokens per side
    (Section 5.1), teacher forcing with the label-smoothed loss of ``config.label_smoothing``
    (Section 5.4), Adam with eq. 3's warmup schedule (Section 5.3), plus gradient clipping at
    ``clip_norm`` (not in the paper; it keeps short, hot runs stable): each step is
    :func:`~transformer_book.train.step.train_step`. The weights and the batch order depend
    only on ``seed``, so two variants with the same seed see the same batches in the same
    order. ``d_k`` applies :func:`restrict_key_size`.
    """
    require(isinstance(config, TransformerConfig), "config", "a TransformerConfig",
            type(config).__name__)
    require(config.vocab_size == data.tokenizer.vocab_size, "config",
            f"vocab_size={data.tokenizer.vocab_size} (the tokenizer's)", config.vocab_size)
    require_positive_int(steps, "steps")
    require_int(seed, "seed", minimum=0)
    for ids, what in ((data.train_src, "training sources"), (data.train_tgt, "training targets")):
        check_ids(ids, config.vocab_size, what)  # once here, never inside a step
    device = get_device() if device is None else torch.device(device)
    watch = Stopwatch()
    set_seed(seed)
    model = Transformer(config).to(device)
    unused = restrict_key_size(model, d_k) if d_k is not None else 0
    optimizer, scheduler = make_optimizer(model, config.d_model, warmup_steps, lr_factor)
    trainer = Trainer(model, optimizer, scheduler, config.label_smoothing, clip_norm=clip_norm)
    sampler = TokenBudgetSampler([len(s) for s in data.train_src], max_tokens,
                                 [len(t) + 1 for t in data.train_tgt], shuffle=True, seed=seed)
    model.train()
    losses, epochs = _fit(trainer, data, sampler, steps, device, name)
    scores = evaluate_variant(model, data, bleu_sentences=bleu_sentences, device=device)
    return AblationResult(
        name=name, overrides=dict(overrides or {}), seed=seed,
        num_parameters=count_parameters(model) - unused, steps=steps, train_losses=losses,
        val_nll=scores.val_nll, val_ppl=scores.val_ppl, bleu=scores.bleu,
        bleu_sentences=len(scores.translations), seconds=watch.seconds,
        extra={"epochs": epochs, "d_k": d_k if d_k is not None else config.d_k},
        translations=scores.translations)


def _fit(trainer: Trainer, data: PreparedData, sampler: TokenBudgetSampler, steps: int,
         device: torch.device, name: str) -> tuple[list[float], int]:
    """``steps`` training steps on ``data``'s training pairs: the loss of each and how many
    epochs were begun."""
    losses, epochs = [], 0
    try:
        for epoch, chunk in _steps(sampler, steps):
            batch = make_step_batch(data.train_src, data.train_tgt, chunk, device)
            losses.append(train_step(trainer, batch).loss)
            epochs = epoch + 1
    except NonFiniteLossError as error:
        raise NonFiniteLossError(f"{name}: {error}") from None
    return losses, epochs


def _steps(sampler: TokenBudgetSampler, steps: int) -> Iterator[tuple[int, list[list[int]]]]:
    """``(epoch, one step's batches)`` for ``steps`` steps, epoch after epoch (each
    shuffled differently)."""
    epoch, taken = 0, 0
    while True:
        for chunk in epoch_steps(sampler, epoch):
            if taken == steps:
                return
            yield epoch, chunk
            taken += 1
        epoch += 1


def run_key(config: TransformerConfig, data: PreparedData, *, steps: int, seed: int,
            d_k: int | None = None, **train_kwargs: Any) -> str:
    """16 hex digits of SHA-256 over everything one :func:`train_variant` run depends on:
    the model's config, the token ids of the training and validation pairs, the
    validation references, ``steps``, ``seed``, ``d_k`` and the other training settings
    (``device`` by its kind only: "cpu", "cuda"). The code is not in it: after changing
    the training code, empty the cache folder."""
    settings = dict(train_kwargs)
    device = settings.pop("device", None)
    settings["device"] = (get_device() if device is None else torch.device(device)).type
    payload = {"config": config.to_dict(), "steps": steps, "seed": seed, "d_k": d_k,
               "train": settings, "data": [data.train_src, data.train_tgt, data.val_src,
                                           data.val_tgt, data.val_references]}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _stored_result(result: Mapping[str, Any]) -> AblationResult:
    """An :class:`AblationResult` from its JSON form (a BLEU of null is NaN)."""
    return AblationResult(**{**result, "bleu": math.nan if result["bleu"] is None
                             else result["bleu"]})


def _cached(path: Path, key: str) -> AblationResult | None:
    """The run stored at ``path`` under ``key``, or None."""
    if not path.is_file():
        return None
    stored = json.loads(path.read_text(encoding="utf-8"))
    if stored.get("key") != key:
        return None
    return _stored_result(stored["result"])


def recorded_runs(kind: str, results: str | Path | None = None
                  ) -> dict[str, Any]:
    """The runs of the newest record ``<kind>-*.json`` in ``results`` (default: the
    course's recorded results, :func:`~transformer_book.util.results.recorded_results_dir`),
    by run key, for :func:`run_ablation`'s ``recorded``; ``{}`` when there is none.
    ``scripts/record_ablation_runs.py`` writes such a record from a cache folder."""
    folder = Path(results) if results is not None else recorded_results_dir()
    if folder is None:
        return {}
    found = sorted(folder.glob(f"{kind}-*.json"))
    if not found:
        return {}
    record = json.loads(found[-1].read_text(encoding="utf-8"))
    runs = record.get("runs")
    require(isinstance(runs, dict), f"{found[-1]}: runs", "a dict of run key -> run",
            type(runs).__name__)
    return runs


def run_ablation(
    variants: Mapping[str, Mapping[str, Any]],
    base: TransformerConfig,
    data: PreparedData,
    *,
    steps: int,
    seeds: Sequence[int] = (0,),
    progress: bool = False,
    cache: str | Path | None = None,
    recorded: Mapping[str, Any] | None = None,
    **train_kwargs: Any,
) -> dict[str, VariantRuns]:
    """Train every variant of ``base`` once per seed (Section 6.2, Table 3).

    ``variants`` maps a row name to overrides: any :class:`TransformerConfig` field
    (``num_heads``, ``dropout``, ``label_smoothing``, ``positional``, ...) plus ``d_k``
    (reduced key size, :func:`restrict_key_size`) and ``seeds`` (that row's own seeds
    instead of ``seeds``). An empty dict is the baseline. Run ``s`` of every variant starts
    from ``set_seed(s)`` and sees the same batches in the same order, so runs with equal
    seeds are paired. ``train_kwargs`` go to :func:`train_variant` (``max_tokens``,
    ``warmup_steps``, ``lr_factor``, ``bleu_sentences``, ``device`` ...). ``cache``: a
    folder; a run found there under its :func:`run_key` is read instead of trained, and
    every run trained is written there (``run-<key>.json``). ``recorded``: runs by their
    :func:`run_key`, as :func:`recorded_runs` reads them from a record in ``results/``; a
    run not in ``cache`` but in ``recorded`` is read from it instead of trained (its key
    covers everything the run depends on, so only the very same run matches).

    Returns ``name -> VariantRuns`` in the order of ``variants``. Every override is checked
    before the first run starts.
    """
    require(isinstance(variants, Mapping) and len(variants) > 0, "variants",
            "a non-empty dict of name -> overrides", repr(variants))
    require(cache is None or isinstance(cache, (str, Path)), "cache",
            "a folder (str or Path) or None", type(cache).__name__)
    require(recorded is None or isinstance(recorded, Mapping), "recorded",
            "a dict of run key -> stored run (recorded_runs()) or None",
            type(recorded).__name__)
    plans = []
    for name, overrides in variants.items():
        require(isinstance(overrides, Mapping), f"variants[{name!r}]", "a dict of overrides",
                repr(overrides))
        fields = {k: v for k, v in overrides.items() if k not in EXTRA_KEYS}
        config = base.replace(**fields)  # validates the field names and values
        own = _check_seeds(overrides.get("seeds", seeds), f"variants[{name!r}]['seeds']"
                           if "seeds" in overrides else "seeds")
        plans.append((name, dict(overrides), config, own))
    out = {}
    for name, overrides, config, own in plans:
        runs = []
        for seed in own:
            d_k = overrides.get("d_k")
            result, path, key = None, None, ""
            if cache is not None or recorded is not None:
                key = run_key(config, data, steps=steps, seed=seed, d_k=d_k, **train_kwargs)
            if cache is not None:
                path = Path(cache) / f"run-{key}.json"
                result = _cached(path, key)
            if result is None and recorded is not None and key in recorded:
                result = _stored_result(recorded[key])
            found = result is not None
            if result is None:
                result = train_variant(config, data, steps=steps, seed=seed, d_k=d_k,
                                       name=name, overrides=overrides, **train_kwargs)
                if path is not None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    stored = dataclasses.asdict(result)  # JSON has no NaN: no BLEU is null
                    stored["bleu"] = None if math.isnan(result.bleu) else result.bleu
                    atomic_write_json(path, {"key": key, "result": stored})
            result = dataclasses.replace(result, name=name, overrides=dict(overrides))
            if progress:
                print(f"{name:>24}, seed {seed}: val ppl {result.val_ppl:6.2f}, "
                      f"BLEU {result.bleu:5.2f} ({result.seconds:.0f} s"
                      f"{', cached' if found else ''})", flush=True)
            runs.append(result)
        out[name] = VariantRuns(name, overrides, runs)
    return out


def _check_seeds(seeds: Any, argument: str) -> list[int]:
    """A non-empty sequence of distinct seeds >= 0, as a list."""
    require(isinstance(seeds, Sequence) and not isinstance(seeds, (str, bytes))
            and len(seeds) > 0, argument, "a non-empty sequence of seeds, e.g. (0, 1, 2)",
            repr(seeds))
    for seed in seeds:
        require_int(seed, argument, minimum=0)
    require(len(set(seeds)) == len(seeds), argument, "distinct seeds", list(seeds))
    return list(seeds)


def results_by_name(results: Sequence[AblationResult]) -> dict[str, AblationResult]:
    """Index results by their variant name (names must be unique)."""
    out = {r.name: r for r in results}
    require(len(out) == len(results), "results", "unique variant names",
            [r.name for r in results])
    return out
