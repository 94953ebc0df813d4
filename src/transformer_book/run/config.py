"""A training run's settings: what ``transformer-book train`` reads from a TOML file
in ``configs/`` (sections ``[model]``, ``[data]``, ``[train]``, ``[decode]``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformer_book.nn.config import PRESETS, TransformerConfig
from transformer_book.util.validation import (
    BookError,
    fail,
    require,
    require_number,
    require_one_of,
    require_positive_int,
    require_positive_number,
)

try:
    import tomllib  # Python >= 3.11
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ModuleNotFoundError:
        tomllib = None  # type: ignore[assignment]

PRECISIONS = ("auto", "fp32", "bf16", "fp16")


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
    """``[data]``: language pair, joint BPE size, token budget per batch (Section 5.1).

    ``max_tokens`` counts one side, padding included, like Section 5.1's "approximately
    25000 source tokens and 25000 target tokens"; ``train_subset`` keeps only the first
    pairs of the training split (``None``: all of them).
    """

    src: str = "de"
    tgt: str = "en"
    vocab_size: int = 8000
    max_tokens: int = 4096
    train_subset: int | None = None
    max_len: int = 256  # sentence pairs longer than this (in BPE tokens) are dropped
    data_dir: str | None = None


@dataclass
class TrainSection:
    """``[train]``: schedule (Section 5.3), budget, accumulation, checkpoints, precision.

    Training stops at whichever budget comes first, ``max_steps`` optimizer steps or
    ``max_minutes`` of wall time (set one to ``None`` to disable it; not both).
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
    seed: int = 0
    precision: str = "auto"


@dataclass
class DecodeSection:
    """``[decode]``: Section 6.1, "beam size of 4 and length penalty α = 0.6 ... maximum
    output length to input length + 50"; max length = max_len_a · input length + max_len_b."""

    beam_size: int = 4
    alpha: float = 0.6
    max_len_a: float = 1.0
    max_len_b: int = 50


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
        """Check every value; errors (:class:`BookError`) name ``source`` and ``section.key``."""
        require_one_of(self.model.preset, f"{source} [model] preset", PRESETS)
        require(isinstance(self.model.overrides, dict), f"{source} [model] overrides",
                "a table", repr(self.model.overrides))
        d, t, dec = self.data, self.train, self.decode
        for section, name, value, minimum in (
            ("data", "vocab_size", d.vocab_size, 4),
            ("data", "max_tokens", d.max_tokens, 1),
            ("data", "max_len", d.max_len, 1),
            ("train", "warmup_steps", t.warmup_steps, 1),
            ("train", "accumulation", t.accumulation, 1),
            ("train", "eval_every", t.eval_every, 1),
            ("train", "checkpoint_every", t.checkpoint_every, 1),
            ("train", "keep_last", t.keep_last, 1),
            ("train", "seed", t.seed, 0),
            ("decode", "beam_size", dec.beam_size, 1),
            ("decode", "max_len_b", dec.max_len_b, 0),
        ):
            require_positive_int(value, f"{source} [{section}] {name}", minimum)
        if d.train_subset is not None:
            require_positive_int(d.train_subset, f"{source} [data] train_subset")
        require(isinstance(d.src, str) and isinstance(d.tgt, str) and d.src != d.tgt,
                f"{source} [data] src/tgt", "two different language codes", (d.src, d.tgt))
        require(t.max_steps is not None or t.max_minutes is not None,
                f"{source} [train] max_steps/max_minutes", "at least one budget", "neither")
        if t.max_steps is not None:
            require_positive_int(t.max_steps, f"{source} [train] max_steps")
        for name, value in (("max_minutes", t.max_minutes), ("clip_norm", t.clip_norm)):
            if value is not None:
                require_positive_number(value, f"{source} [train] {name}")
        require_positive_number(t.lr_factor, f"{source} [train] lr_factor")
        require_one_of(t.precision, f"{source} [train] precision", PRECISIONS)
        require_number(dec.alpha, f"{source} [decode] alpha", minimum=0)
        require_positive_number(dec.max_len_a, f"{source} [decode] max_len_a", allow_zero=True)
        try:  # the [model] keys and values (an unknown key, dropout = "0.1", ...)
            self.model.build(d.vocab_size)
        except BookError as error:
            raise BookError(f"{source} [model] {error}") from error

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


def load_run_config(path: str | Path) -> RunConfig:
    """Read a training run's TOML file (``configs/*.toml``) into a :class:`RunConfig`.

    Sections ``[model]`` (``preset`` plus TransformerConfig overrides), ``[data]``,
    ``[train]`` and ``[decode]``; anything else raises a :class:`BookError` naming the file,
    the section and the keys.
    """
    path = Path(path)
    if tomllib is None:  # pragma: no cover - Python 3.10 without tomli
        raise ModuleNotFoundError("reading TOML on Python 3.10 needs `tomli`: pip install tomli")
    require(path.is_file(), "path", "an existing TOML file", str(path))
    with path.open("rb") as handle:
        try:
            data = tomllib.load(handle)
        except tomllib.TOMLDecodeError as error:
            raise fail("path", "valid TOML", f"{path}: {error}") from error
    return RunConfig.from_dict(data, source=str(path))
