"""Using a trained model: load a checkpoint (optionally averaged), translate text, score it.

Section 6.1: "For the base models, we used a single model obtained by averaging the last 5
checkpoints ... We used beam search with a beam size of 4 and length penalty α = 0.6 ...
We set the maximum output length during inference to input length + 50, but terminate
early when possible." The CLI's ``translate`` and ``evaluate`` and the training loop's
validation BLEU all go through :func:`translate_ids`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from transformer_book.data.tokenizer import BPETokenizer
from transformer_book.nn.config import TransformerConfig
from transformer_book.run.checkpoint import (
    METADATA,
    TOKENIZER,
    average_checkpoints,
    list_checkpoints,
    load_checkpoint,
)
from transformer_book.run.config import RunConfig
from transformer_book.util.validation import fail, require, require_positive_int

__all__ = [
    "TrainedModel",
    "decode_length",
    "encode_sources",
    "load_trained",
    "resolve_checkpoint",
    "translate",
    "translate_ids",
]

# Sentences decoded together at most (beam search multiplies this by the beam size).
MAX_SENTENCES_PER_BATCH = 128


@dataclass
class TrainedModel:
    """A model ready to translate, with what it was trained with.

    Fields: ``model`` (eval mode, on its device), ``tokenizer``, ``model_config``,
    ``run_config``, ``step`` (of the newest checkpoint used) and ``checkpoints`` (every
    folder whose weights went in: one, or the averaged ones).
    """

    model: nn.Module
    tokenizer: BPETokenizer
    model_config: TransformerConfig
    run_config: RunConfig
    step: int
    checkpoints: list[Path] = field(default_factory=list)


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder, or the newest checkpoint of a run folder (``runs/small``)."""
    path = Path(path)
    require(path.exists(), "checkpoint", "an existing checkpoint or run folder", str(path))
    if (path / METADATA).is_file():
        return path
    found = list_checkpoints(path)
    require(bool(found), "checkpoint",
            f"a checkpoint folder (with {METADATA}) or a run folder holding step_* checkpoints",
            f"{path} (none found)")
    return found[-1]


def _configs(metadata: dict[str, Any], directory: Path) -> tuple[TransformerConfig, RunConfig]:
    config = metadata.get("config")
    require(isinstance(config, dict) and {"model", "run"} <= set(config), str(directory),
            "a checkpoint written by the training loop (config with 'model' and 'run')",
            f"config keys {sorted(config) if isinstance(config, dict) else config!r}")
    return (TransformerConfig.from_dict(config["model"]),
            RunConfig.from_dict(config["run"], source=f"{directory}/{METADATA} [run]"))


def load_trained(
    checkpoint: str | Path,
    device: torch.device | str | None = None,
    average: int | None = None,
) -> TrainedModel:
    """Build the model a checkpoint was trained as and load its weights.

    Args:
        checkpoint: a checkpoint folder, or a run folder (its newest checkpoint is used).
        device: where to put the model (default CPU).
        average: if given, load the element-wise mean of the last ``average`` checkpoints
            of the run folder (Section 6.1); they must all come from the same config.

    Raises:
        ValueError: corrupted files (sha256), a folder that is no checkpoint, checkpoints
            of different configs, or fewer than ``average`` checkpoints.
    """
    from transformer_book.nn.transformer import Transformer

    directory = resolve_checkpoint(checkpoint)
    metadata = load_checkpoint(directory)  # verifies every file's sha256
    model_config, run_config = _configs(metadata, directory)
    require((directory / TOKENIZER).is_file(), "checkpoint",
            f"a checkpoint saved with its tokenizer ({TOKENIZER})", f"none in {directory}")
    tokenizer = BPETokenizer.load(directory / TOKENIZER)
    require(tokenizer.vocab_size == model_config.vocab_size, str(directory / TOKENIZER),
            f"a tokenizer of {model_config.vocab_size} tokens (the model's vocab_size)",
            tokenizer.vocab_size)
    model = Transformer(model_config)
    used = [directory]
    if average is None or average == 1:
        load_checkpoint(directory, model)
    else:
        require_positive_int(average, "average")
        run_dir = directory.parent
        everything = list_checkpoints(run_dir)
        require(len(everything) >= average, "average",
                f"at most the {len(everything)} checkpoints in {run_dir}", average)
        used = everything[-average:]
        for other in used:
            other_model, _ = _configs(load_checkpoint(other), other)
            require(other_model == model_config, "average",
                    f"checkpoints of one model config (as {directory})",
                    f"{other} has a different config")
        model.load_state_dict(average_checkpoints(used))
    model.to(torch.device(device or "cpu")).eval()
    return TrainedModel(model, tokenizer, model_config, run_config, int(metadata["step"]), used)


def encode_sources(
    tokenizer: BPETokenizer, sentences: Sequence[str], max_positions: int,
    argument: str = "sentences",
) -> list[list[int]]:
    """BPE ids of each sentence; empty or too-long sentences raise a ``ValueError``.

    A source longer than ``max_positions`` tokens has no positional encoding to add
    (Section 3.5), so it is refused rather than silently truncated.
    """
    require(not isinstance(sentences, str) and len(sentences) > 0, argument,
            "at least one sentence", repr(sentences)[:80])
    for i, text in enumerate(sentences):
        require(isinstance(text, str) and text.strip() != "", f"{argument}[{i}]",
                "a non-empty sentence", repr(text))
    ids = tokenizer.encode_batch(list(sentences))
    for i, row in enumerate(ids):
        if len(row) > max_positions:
            raise fail(f"{argument}[{i}]",
                       f"at most {max_positions} BPE tokens (the model's max_len positions)",
                       f"{len(row)} tokens")
    return ids


def decode_length(src_len: int, max_len_a: float, max_len_b: int, max_positions: int) -> int:
    """Section 6.1's output budget ``a · src_len + b``, capped by the model's positions."""
    return max(1, min(int(max_len_a * src_len + max_len_b), max_positions - 1))


def _batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices sorted by length, cut so ``len(batch) · longest <= max_tokens``."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and ((len(current) + 1) * lengths[i] > max_tokens
                        or len(current) >= MAX_SENTENCES_PER_BATCH):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


@torch.no_grad()
def translate_ids(
    model: nn.Module,
    sources: Sequence[Sequence[int]],
    *,
    beam_size: int = 1,
    alpha: float = 0.6,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    max_tokens: int = 4096,
    device: torch.device | str | None = None,
    stop: str = "exact",
) -> list[list[int]]:
    """Decode every source (lists of BPE ids), in the input order, without special tokens.

    ``beam_size == 1`` is greedy decoding; otherwise beam search with length penalty
    ``alpha`` (Section 6.1) and stopping rule ``stop`` (see
    :func:`~transformer_book.inference.decode.beam_search`). Sources are decoded in length-sorted
    batches of at most ``max_tokens`` source tokens. The output length is at most
    ``a · src_len + b``.
    """
    from transformer_book.data.batching import pad_sequences
    from transformer_book.inference.decode import STOPPING_RULES, beam_search, greedy_decode

    require_positive_int(beam_size, "beam_size")
    require(stop in STOPPING_RULES, "stop", f"one of {STOPPING_RULES}", repr(stop))
    config = model.config
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    outputs: list[list[int]] = [[] for _ in sources]
    specials = {config.pad_id, config.bos_id, config.eos_id}
    try:
        for batch in _batches([len(s) for s in sources], max_tokens):
            src = pad_sequences([list(sources[i]) for i in batch], config.pad_id).to(device)
            if beam_size == 1:
                limit = decode_length(src.shape[1], max_len_a, max_len_b, config.max_len)
                hyps = greedy_decode(model, src, max_len=limit)
            else:
                hyps = beam_search(model, src, beam_size=beam_size, alpha=alpha,
                                   max_len_a=max_len_a, max_len_b=max_len_b, stop=stop)
            for i, hyp in zip(batch, hyps, strict=True):
                ids = [int(t) for t in hyp]
                if config.eos_id in ids:
                    ids = ids[: ids.index(config.eos_id)]
                outputs[i] = [t for t in ids if t not in specials]
    finally:
        model.train(was_training)
    return outputs


def translate(
    trained: TrainedModel,
    sentences: Sequence[str],
    *,
    beam_size: int | None = None,
    alpha: float | None = None,
    max_tokens: int = 4096,
    argument: str = "sentences",
    stop: str = "exact",
) -> list[str]:
    """Translate source sentences with a loaded model; decoding settings default to the
    run config's ``[decode]`` section (Section 6.1: beam 4, α = 0.6, length input + 50).
    ``stop`` is beam search's stopping rule
    (:func:`~transformer_book.inference.decode.beam_search`)."""
    dec = trained.run_config.decode
    ids = encode_sources(trained.tokenizer, sentences, trained.model_config.max_len, argument)
    beam_size = dec.beam_size if beam_size is None else beam_size
    out = translate_ids(trained.model, ids, beam_size=beam_size,
                        alpha=dec.alpha if alpha is None else alpha, max_len_a=dec.max_len_a,
                        max_len_b=dec.max_len_b, max_tokens=max_tokens, stop=stop)
    return [trained.tokenizer.decode(row) for row in out]
