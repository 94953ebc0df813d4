"""A training run's settings: what ``transformer-book train`` reads from a TOML file
in ``configs/`` (sections ``[model]``, ``[data]``, ``[train]``, ``[decode]``)."""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from transformer_book.data.corpora import check_dataset
from transformer_book.data.tokenizer import BOS_ID, EOS_ID, MIN_VOCAB_SIZE, PAD_ID
from transformer_book.nn.config import PRESETS, TransformerConfig
from transformer_book.nn.positional import positional_encoding
from transformer_book.util.registry import Registry
from transformer_book.util.validation import (
    BookError,
    bad_input,
    is_integer,
    is_real,
    require,
    require_int,
    require_number,
    require_one_of,
    require_positive_int,
    require_positive_number,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: tomli, a dependency there (pyproject.toml)
    import tomli as tomllib

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# The largest length-penalty exponent α accepted, here and by beam search (Section 6.1: 0.6).
MAX_ALPHA = 10.0


@dataclass
class ModelSection:
    """``[model]``: a preset name plus overrides of :class:`TransformerConfig` fields."""

    preset: str = "small"
    overrides: dict[str, Any] = field(default_factory=dict)

    def build(self, vocab_size: int) -> TransformerConfig:
        """The model config for a vocabulary of ``vocab_size`` tokens."""
        return TransformerConfig.preset(self.preset, vocab_size, **self.overrides)


@dataclass
class DataSection:
    """``[data]``: the corpus, language pair, joint BPE size, token budget per batch
    (Section 5.1).

    ``dataset`` names an entry of :data:`~transformer_book.data.corpora.DATASETS`:
    ``"multi30k"`` (found in ``data_dir``, ``$TRANSFORMER_BOOK_DATA`` or the cache) or
    ``"parallel-text"`` (the folder ``data_dir`` holding ``train.<src>``, ``train.<tgt>``,
    ``valid.*`` and ``test.*``, one sentence per line). ``max_tokens`` counts one side,
    padding included, like Section 5.1's "approximately 25000 source tokens and 25000 target
    tokens"; ``train_subset`` keeps only the first pairs of the training split (``None``:
    all of them). ``bpe_dropout`` > 0 re-segments
    the training pairs every epoch with BPE-dropout (Provilkov et al., 2020; not in the
    paper): each merge is skipped with that probability; validation and decoding always
    use the plain segmentation.
    """

    dataset: str = "multi30k"
    src: str = "de"
    tgt: str = "en"
    vocab_size: int = 8000
    max_tokens: int = 4096
    train_subset: int | None = None
    max_len: int = 256  # sentence pairs longer than this (in BPE tokens) are dropped
    data_dir: str | None = None
    bpe_dropout: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.data_dir, os.PathLike):  # a Path is kept as its string
            self.data_dir = os.fspath(self.data_dir)


def with_data_defaults(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved ``[data]`` table (a checkpoint's) with every key added since it was written
    (``bpe_dropout``, ``dataset``) at its default, the value it was trained with; empty stays
    empty."""
    return {**dataclasses.asdict(DataSection()), **saved} if saved else saved


@dataclass
class TrainSection:
    """``[train]``: schedule (Section 5.3), budget, accumulation, checkpoints, precision.

    Training stops at whichever budget comes first, ``max_steps`` optimizer steps or
    ``max_minutes`` of wall time (set one to ``None`` to disable it; not both).
    ``precision`` is one of :data:`PRECISIONS`: "auto" times a product in fp32 and in 16
    bits on the training device and takes 16 bits where it is clearly faster; "bf16" is
    kept wherever bf16 autocast runs (:func:`~transformer_book.train.runtime.choose_precision`).
    ``bleu_strategy``: the decoding strategy of the validation BLEU (default ``"greedy"``,
    the cheap check; its settings from ``[decode]``).
    """

    max_steps: int | None = 100_000  # Section 5.2: base models ran 100,000 steps
    max_minutes: float | None = None
    warmup_steps: int = 4000
    lr_factor: float = 1.0
    accumulation: int = 1
    clip_norm: float | None = None
    eval_every: int = 500
    checkpoint_every: int = 1000
    keep_last: int = 5
    keep_best: int = 5
    seed: int = 0
    precision: str = "auto"
    bleu_strategy: str = "greedy"


#: The decoding strategies by name (each a step rule of
#: :func:`~transformer_book.inference.generate.generate`): the ``[decode]`` section's
#: ``strategy``, the CLI's ``--strategy`` and its options (one per setting). Outside
#: packages add theirs through the entry-point group or ``--plugin``
#: (:mod:`transformer_book.util.registry`).
DECODING_STRATEGIES: Registry[Any] = Registry(
    "decoding strategy", "transformer_book.decoding_strategies",
    {"beam": "transformer_book.inference.beam:Beam",
     "greedy": "transformer_book.inference.greedy:Greedy",
     "sample": "transformer_book.inference.decoding:Sampling"})


@dataclass
class DecodeSection:
    """``[decode]``: how translations are decoded. Section 6.1: "beam size of 4 and length
    penalty α = 0.6 ... maximum output length to input length + 50"; max length =
    max_len_a · input length + max_len_b.

    ``strategy`` names an entry of :data:`DECODING_STRATEGIES` (default ``"beam"``);
    ``beam_size`` and ``alpha`` are the settings of any strategy that has them (beam
    search's), and every other key of the section is a setting of the chosen strategy
    (``temperature = 0.8`` for ``"sample"``), kept in ``settings``.
    """

    strategy: str = "beam"
    beam_size: int = 4
    alpha: float = 0.6
    max_len_a: float = 1.0
    max_len_b: int = 50
    settings: dict[str, Any] = field(default_factory=dict)

    def settings_for(self, name: str) -> dict[str, Any]:
        """The section's settings of strategy ``name``: ``beam_size`` and ``alpha`` where it
        has them, and, when ``name`` is the section's strategy, its other settings."""
        fields = strategy_fields(name)
        out: dict[str, Any] = {key: getattr(self, key) for key in ("beam_size", "alpha")
                               if key in fields}
        return {**out, **(self.settings if name == self.strategy else {})}


def strategy_fields(name: str, argument: str = "strategy") -> dict[str, Any]:
    """The settings of the registered strategy ``name``: setting -> default."""
    make = DECODING_STRATEGIES.get(name, argument)
    return {key: value.default for key, value in inspect.signature(make).parameters.items()}


def strategy_help(name: str, key: str) -> str:
    """What setting ``key`` of strategy ``name`` does: its dataclass field's ``help``
    metadata (empty if it has none)."""
    make = DECODING_STRATEGIES.get(name)
    if dataclasses.is_dataclass(make):
        for f in dataclasses.fields(make):
            if f.name == key:
                return str(f.metadata.get("help", ""))
    return ""


def make_strategy(name: str, settings: dict[str, Any], argument: str = "strategy") -> Any:
    """The registered strategy ``name`` made with ``settings`` (each checked by it); an
    unknown name or a setting it does not take is a ``BookError`` naming ``argument``."""
    fields = strategy_fields(name, argument)
    unknown = sorted(set(settings) - set(fields))
    require(not unknown, f"{argument} {name!r}",
            f"its settings ({', '.join(fields) or 'none'})", f"{', '.join(unknown)}")
    strategy = DECODING_STRATEGIES.get(name)(**settings)
    require(callable(getattr(strategy, "step", None)), f"{argument} {name!r}",
            "a step rule (a StepRule with a step method)", type(strategy).__name__)
    return strategy


@dataclass
class RunConfig:
    """Everything ``transformer-book train`` needs: the four sections of a TOML file."""

    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    train: TrainSection = field(default_factory=TrainSection)
    decode: DecodeSection = field(default_factory=DecodeSection)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, source: str = "RunConfig") -> None:
        """Check every value; errors (:class:`BookError`) name ``source`` and ``section.key``.

        Everything that can be known before the data is read is checked here: the model is
        built for ``[data] vocab_size`` (its shapes, heads, dropout, positions), the
        dataset is registered and has the languages (and its folder exists, if it needs
        one), the BPE size is possible, the token budget holds the
        longest kept pair and the learning-rate schedule stays finite.
        """
        require_int(self.data.vocab_size, f"{source} [data] vocab_size", minimum=MIN_VOCAB_SIZE)
        model = _check_model(self.model, self.data, source)
        _check_data(self.data, model, source)
        _check_train(self.train, model, source)
        _check_decode(self.decode, source)

    def model_config(self, vocab_size: int) -> TransformerConfig:
        """The :class:`TransformerConfig` of this run for the trained vocabulary size."""
        return self.model.build(vocab_size)

    def to_dict(self) -> dict[str, Any]:
        """Nested plain dict (section -> key -> value), e.g. for ``checkpoint.json``."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "RunConfig") -> RunConfig:
        """Build from nested dicts; unknown sections or keys raise naming ``source``."""
        require(isinstance(d, dict), source, "a table of sections", type(d).__name__)
        sections = {"model": ModelSection, "data": DataSection, "train": TrainSection,
                    "decode": DecodeSection}
        unknown = sorted(set(d) - set(sections))
        require(not unknown, source, f"sections {sorted(sections)}",
                f"unknown sections {unknown}")
        built: dict[str, Any] = {}
        for name, kind in sections.items():
            require(isinstance(d.get(name, {}), dict), f"{source} [{name}]", "a table",
                    repr(d.get(name)))
            values = dict(d.get(name, {}))
            if kind is ModelSection:
                # [model] holds `preset` plus any TransformerConfig field as an override.
                preset = values.pop("preset", ModelSection.preset)
                if "overrides" in values:
                    nested = values.pop("overrides")
                    require(isinstance(nested, dict), f"{source} [model] overrides",
                            "a table", repr(nested))
                    values = {**nested, **values}
                built[name] = ModelSection(preset=preset, overrides=values)
                continue
            if kind is DecodeSection:  # the keys of no field: the strategy's settings
                fields = {f.name for f in dataclasses.fields(kind)} - {"settings"}
                nested = values.pop("settings", {})
                require(isinstance(nested, dict), f"{source} [decode] settings", "a table",
                        repr(nested))
                others = {**nested, **{k: values.pop(k) for k in sorted(set(values) - fields)}}
                built[name] = DecodeSection(**values, settings=others)
                continue
            known = {f.name for f in dataclasses.fields(kind)}
            extra = sorted(set(values) - known)
            require(not extra, f"{source} [{name}]", f"keys {sorted(known)}",
                    f"unknown keys {extra}")
            built[name] = kind(**values)
        config = cls.__new__(cls)
        for name, value in built.items():
            setattr(config, name, value)
        config.validate(source)
        return config


# The optimizer's β1 (train.objective.make_optimizer: Adam(β1=0.9, β2=0.98)): Adam's first
# step moves a weight by lr / (1 - β1), a float32 number.
ADAM_BETA1 = 0.9
FLOAT32_MAX = 3.4028234663852886e38


def _check_model(model: ModelSection, data: DataSection, source: str) -> TransformerConfig:
    """``[model]``: the preset, the overrides, and the model they build (for ``data``)."""
    where = f"{source} [model]"
    PRESETS.get(model.preset, f"{where} preset")
    require(isinstance(model.overrides, dict), f"{where} overrides", "a table",
            repr(model.overrides))
    require("vocab_size" not in model.overrides, f"{where} vocab_size",
            "no such key (the vocabulary is the trained BPE's, set by [data] vocab_size)",
            repr(model.overrides.get("vocab_size")))
    for name, wanted in (("pad_id", PAD_ID), ("bos_id", BOS_ID), ("eos_id", EOS_ID)):
        value = model.overrides.get(name, wanted)
        require(value == wanted and is_integer(value), f"{where} {name}",
                f"{wanted}, the tokenizer's id (or no such key)", repr(value))
    try:  # the [model] keys and values (an unknown key, dropout = "0.1", ...)
        config = model.build(data.vocab_size)
    except BookError as error:
        raise BookError(f"{where} {error}") from error
    # The positional encoding accepts d_model (sin/cos pairs need an even one); built for one
    # position, away from the global random state (a learned table draws numbers).
    with torch.random.fork_rng(devices=[]):
        try:
            positional_encoding(config.positional, config.d_model, 1)
        except BookError as error:
            raise BookError(f"{where} {error} ([model] positional = {config.positional!r})"
                            ) from error
    return config


def _check_data(d: DataSection, model: TransformerConfig, source: str) -> None:
    """``[data]``: dataset, languages, data folder, BPE size, token budget, lengths, subset."""
    where = f"{source} [data]"
    check_dataset(d.dataset, d.src, d.tgt, d.data_dir, where)
    require_positive_int(d.max_len, f"{where} max_len")
    longest = min(d.max_len, model.max_len)  # the longest pair prepare_data keeps
    require(is_integer(d.max_tokens) and d.max_tokens >= longest, f"{where} max_tokens",
            f"an integer >= {longest}, the longest pair kept (min of [data] max_len and "
            "[model] max_len), so that every pair fits in a batch", repr(d.max_tokens))
    if d.train_subset is not None:
        require_positive_int(d.train_subset, f"{where} train_subset")
    require(is_real(d.bpe_dropout) and 0.0 <= d.bpe_dropout < 1.0,
            f"{where} bpe_dropout", "a number in [0, 1) (0: no BPE-dropout)",
            repr(d.bpe_dropout))


def _check_train(t: TrainSection, model: TransformerConfig, source: str) -> None:
    """``[train]``: budgets, schedule, accumulation, intervals, seed and precision."""
    where = f"{source} [train]"
    for name, minimum in (("warmup_steps", 1), ("accumulation", 1), ("eval_every", 1),
                          ("checkpoint_every", 1), ("keep_last", 1), ("keep_best", 0),
                          ("seed", 0)):
        require_int(getattr(t, name), f"{where} {name}", minimum=minimum)
    require(t.max_steps is not None or t.max_minutes is not None,
            f"{where} max_steps/max_minutes", "at least one budget", "neither")
    if t.max_steps is not None:
        require_positive_int(t.max_steps, f"{where} max_steps")
    for name, value in (("max_minutes", t.max_minutes), ("clip_norm", t.clip_norm)):
        if value is not None:
            require_positive_number(value, f"{where} {name}")
    require_positive_number(t.lr_factor, f"{where} lr_factor")
    # Section 5.3's rate peaks at step warmup_steps: lr_factor · (d_model · warmup_steps)^-0.5.
    peak = t.lr_factor / math.sqrt(model.d_model * t.warmup_steps)
    limit = FLOAT32_MAX * (1 - ADAM_BETA1) * math.sqrt(model.d_model * t.warmup_steps)
    require(peak / (1 - ADAM_BETA1) <= FLOAT32_MAX, f"{where} lr_factor",
            f"at most {limit:.3g}, so that the peak learning rate (lr_factor · (d_model · "
            "warmup_steps)^-0.5) and Adam's step stay finite in float32", repr(t.lr_factor))
    require_one_of(t.precision, f"{where} precision", PRECISIONS)
    DECODING_STRATEGIES.get(t.bleu_strategy, f"{where} bleu_strategy")


def _check_decode(dec: DecodeSection, source: str) -> None:
    """``[decode]``: the strategy and its settings (by making it), beam size, length
    penalty and maximum output length."""
    where = f"{source} [decode]"
    require_positive_int(dec.beam_size, f"{where} beam_size")
    require_int(dec.max_len_b, f"{where} max_len_b", minimum=0)
    require_number(dec.alpha, f"{where} alpha", minimum=0, maximum=MAX_ALPHA)
    require_positive_number(dec.max_len_a, f"{where} max_len_a", allow_zero=True)
    require(isinstance(dec.strategy, str), f"{where} strategy", "a strategy name",
            repr(dec.strategy))
    require(isinstance(dec.settings, dict), f"{where} settings", "a table", repr(dec.settings))
    try:
        make_strategy(dec.strategy, dec.settings_for(dec.strategy), f"{where} strategy")
    except BookError as error:  # a setting the strategy refused names the setting alone
        message = str(error)
        raise BookError(message if message.startswith(where) else f"{where} {message}") from None


def load_run_config(path: str | Path) -> RunConfig:
    """Read a training run's TOML file (``configs/*.toml``) into a :class:`RunConfig`.

    Sections ``[model]`` (``preset`` plus TransformerConfig overrides), ``[data]``,
    ``[train]`` and ``[decode]``; anything else raises a :class:`BookError` naming the file,
    the section and the keys.
    """
    path = Path(path)
    require(path.is_file(), "path", "an existing TOML file", str(path))
    with path.open("rb") as handle:
        try:
            data = tomllib.load(handle)
        except tomllib.TOMLDecodeError as error:
            raise bad_input("path", "valid TOML", f"{path}: {error}") from error
    return RunConfig.from_dict(data, source=str(path))
