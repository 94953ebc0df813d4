"""Translating with a trained model: sentences to BPE ids, ids to translations (Section 6.1).

Section 6.1: "We used beam search with a beam size of 4 and length penalty α = 0.6 ... We
set the maximum output length during inference to input length + 50, but terminate early
when possible." The CLI's ``translate`` and ``evaluate``, chapter 11 and the training loop's
validation BLEU all go through :func:`translate_ids`, which decodes with any
:class:`~transformer_book.inference.generate.StepRule`. Each sentence's length budget is
``max_len_a · |x| + max_len_b`` for its own length ``|x|``
(:func:`~transformer_book.inference.lengths.output_length_limits`, which greedy and beam
search both call), so a translation does not depend on which sentences share its batch.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch

from transformer_book.data.batching import pad_sequences
from transformer_book.data.tokenizer import BPETokenizer
from transformer_book.inference.decoding import decoding_strategy
from transformer_book.inference.generate import CACHES, Limits, StepRule, generate
from transformer_book.inference.greedy import Greedy
from transformer_book.inference.trained import TrainedModel
from transformer_book.nn.transformer import Transformer
from transformer_book.util.validation import (
    bad_input,
    require,
    require_bool,
    require_one_of,
    require_positive_int,
)

__all__ = ["MAX_SENTENCES_PER_BATCH", "choose_strategy", "encode_sources", "translate",
           "translate_ids"]

# Sentences decoded together at most (beam search multiplies this by the beam size).
MAX_SENTENCES_PER_BATCH = 128


def encode_sources(
    tokenizer: BPETokenizer, sentences: Sequence[str], max_positions: int,
    argument: str = "sentences",
) -> list[list[int]]:
    """BPE ids of each sentence; empty, unencodable (a lone surrogate) or too-long sentences
    raise a ``BookError`` naming the sentence.

    A source longer than ``max_positions`` tokens has no positional encoding to add
    (Section 3.5), so it is refused rather than silently truncated.
    """
    require(not isinstance(sentences, str) and len(sentences) > 0, argument,
            "at least one sentence", repr(sentences)[:80])
    for i, text in enumerate(sentences):
        require(isinstance(text, str) and text.strip() != "", f"{argument}[{i}]",
                "a non-empty sentence", repr(text))
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:  # a lone surrogate: no tokenizer can read it
            raise bad_input(f"{argument}[{i}]", "text that UTF-8 can encode",
                       f"{text[error.start:error.end]!r} at position {error.start}") from None
    ids = tokenizer.encode_batch(list(sentences))
    for i, row in enumerate(ids):
        if len(row) > max_positions:
            raise bad_input(f"{argument}[{i}]",
                       f"at most {max_positions} BPE tokens (the model's max_len positions)",
                       f"{len(row)} tokens")
    return ids


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


def _check_sources(model: Transformer, sources: Sequence[Sequence[int]]) -> None:
    """Every source a list of ids the model can read. The values are checked here, once per
    call and on the CPU, before anything goes to the model's device: all the sources in one
    ``(N, longest)`` tensor, built from one flat array (a few ms for 1,000 sentences, where
    ``torch.tensor`` of the nested lists would take ten times longer)."""
    require(isinstance(sources, Sequence) and not isinstance(sources, (str, bytes)),
            "sources", "a list of BPE id lists", type(sources).__name__)
    if len(sources) == 0:
        return
    try:
        flat = np.array(list(itertools.chain.from_iterable(sources)))  # every id, in order
    except (TypeError, ValueError) as error:  # a row that is no list, lists of lists
        raise bad_input("sources", "lists of integer token ids", f"{error}") from error
    require(flat.ndim == 1 and (flat.dtype.kind in "iu" or flat.size == 0), "sources",
            "lists of integer token ids", f"values of dtype {flat.dtype}")
    lengths = torch.tensor([len(s) for s in sources])  # (N,)
    ids = torch.full((len(sources), max(int(lengths.max()), 1)), model.config.pad_id,
                     dtype=torch.long)  # (N, longest)
    ids[torch.arange(ids.shape[1]) < lengths[:, None]] = torch.from_numpy(flat).long()
    model.check_ids(ids, "sources")  # ids in range, at most max_len positions


def _model_device(model: Transformer, device: torch.device | str | None) -> torch.device:
    """The device to decode on: the model's; ``device``, if given, must name it (``"cuda"``
    names ``cuda:0``): sources on another device than the weights cannot be decoded."""
    own = next(model.parameters()).device
    if device is None:
        return own
    try:
        wanted = torch.device(device)
    except (RuntimeError, TypeError):  # "tpu", 5: torch's own message lists its internals
        raise bad_input("device", "a torch device such as cpu, cuda, cuda:1 or mps",
                   repr(device)) from None
    require(wanted.type == own.type and wanted.index in (None, own.index or 0), "device",
            f"the model's device ({own}) or None", repr(device))
    return own


@torch.no_grad()
def translate_ids(
    model: Transformer,
    sources: Sequence[Sequence[int]],
    strategy: StepRule | None = None,
    *,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    max_tokens: int = 4096,
    cache: str = "growing",
    device: torch.device | str | None = None,
    progress: bool = False,
) -> list[list[int]]:
    """Decode every source (lists of BPE ids), in the input order, without special tokens.

    ``strategy`` is a step rule (:class:`~transformer_book.inference.generate.StepRule`):
    ``Greedy()`` (the default), ``Beam(beam_size=4, alpha=0.6)`` (Section 6.1),
    ``Sampling(temperature, top_p, seed)``, or any other
    (:data:`~transformer_book.run.config.DECODING_STRATEGIES`), decoded by
    :func:`~transformer_book.inference.generate.generate` with ``cache`` (one of its
    :data:`~transformer_book.inference.generate.CACHES`: the same translations). Sources are
    decoded in length-sorted batches of at most ``max_tokens`` source tokens; each
    translation has at most ``max_len_a · |x| + max_len_b`` tokens, ``|x|`` its own
    source's length. Every
    argument is checked before anything is decoded (the strategy's settings against the
    model by its ``check``: a beam no wider than the vocabulary). ``progress`` shows a tqdm
    bar of the sentences decoded, with its rate and time left (on stderr outside a notebook),
    once every argument has been checked; it changes nothing that is decoded.
    """
    require(isinstance(model, Transformer), "model", "a transformer_book Transformer",
            type(model).__name__)
    strategy = Greedy() if strategy is None else strategy
    require(isinstance(strategy, StepRule), "strategy",
            "a decoding strategy (a StepRule), e.g. Beam(beam_size=4)", type(strategy).__name__)
    config = model.config
    strategy.check(config)
    limits = Limits(max_len_a, max_len_b)
    require_positive_int(max_tokens, "max_tokens")
    require_one_of(cache, "cache", CACHES)
    require_bool(progress, "progress")
    device = _model_device(model, device)
    _check_sources(model, sources)
    if progress:  # an optional display, imported once the arguments are checked
        from tqdm.auto import tqdm  # a widget in a notebook, a line on stderr elsewhere
    else:  # disabled below; tqdm.auto's import warns in a notebook without ipywidgets
        from tqdm.std import tqdm
    outputs: list[list[int]] = [[] for _ in sources]
    specials = {config.pad_id, config.bos_id, config.eos_id}
    # Batches come shortest first: the early rate overstates the later ones, so the first
    # estimates of the time left are low.
    with tqdm(total=len(sources), desc="translating", unit="sentence", dynamic_ncols=True,
              disable=not progress) as bar:
        for batch in _batches([len(s) for s in sources], max_tokens):
            src = pad_sequences([list(sources[i]) for i in batch], config.pad_id).to(device)
            hyps = generate(model, src, strategy, limits, cache=cache)
            for i, hyp in zip(batch, hyps, strict=True):
                ids = [int(t) for t in hyp]
                if config.eos_id in ids:
                    ids = ids[: ids.index(config.eos_id)]
                outputs[i] = [t for t in ids if t not in specials]
            bar.update(len(batch))
    return outputs


def choose_strategy(trained: TrainedModel, strategy: str | StepRule | None = None,
                    **settings: Any) -> StepRule:
    """The strategy a call asks for: ``strategy`` itself (a step rule, with no
    ``settings``), or the one registered by that name (default: the run config's
    ``[decode] strategy``) made with ``settings``, each setting not given (or ``None``)
    taken from ``[decode]`` (:meth:`~transformer_book.run.config.DecodeSection.settings_for`:
    beam size and α, Section 6.1's 4 and 0.6 in the configs)."""
    given = {key: value for key, value in settings.items() if value is not None}
    if isinstance(strategy, StepRule):
        require(not given, "settings", "none with a strategy object (they are its own)",
                ", ".join(sorted(given)))
        return strategy
    dec = trained.run_config.decode
    name = dec.strategy if strategy is None else strategy
    require(isinstance(name, str), "strategy", "a strategy name, a StepRule or None",
            type(name).__name__)
    return decoding_strategy(name, **{**dec.settings_for(name), **given})


def translate(
    trained: TrainedModel,
    sentences: Sequence[str],
    strategy: str | StepRule | None = None,
    *,
    max_tokens: int = 4096,
    cache: str = "growing",
    argument: str = "sentences",
    progress: bool = False,
    **settings: Any,
) -> list[str]:
    """Translate source sentences with a loaded model and a decoding strategy
    (:func:`choose_strategy`: by default the run config's ``[decode]``, Section 6.1's beam 4
    and α = 0.6): ``"beam"`` (``beam_size``, ``alpha``, ``stop``; a beam of one is greedy
    search), ``"greedy"``, ``"sample"`` (``temperature``, ``top_p``, ``seed``), any other
    registered name, or a step rule. The length limits are the config's too (length input +
    50). ``argument`` names ``sentences`` in error messages; ``progress`` shows a bar of the
    sentences decoded (:func:`translate_ids`).
    """
    chosen = choose_strategy(trained, strategy, **settings)
    dec = trained.run_config.decode
    ids = encode_sources(trained.tokenizer, sentences, trained.model_config.max_len, argument)
    model = cast(Transformer, trained.model)  # translate_ids checks that it is one
    out = translate_ids(model, ids, chosen, max_len_a=dec.max_len_a, max_len_b=dec.max_len_b,
                        max_tokens=max_tokens, cache=cache, progress=progress)
    return [trained.tokenizer.decode(row) for row in out]
