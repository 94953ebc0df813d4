"""Validation during training: the validation loss and greedy BLEU of the model being trained
(Section 6.2 of the paper reports both on the development set, newstest2013; ours is
Multi30k's val split).

:func:`validation_loss` is the package's one validation loss: the loop
(:mod:`transformer_book.train.loop`) calls it through :func:`validate` every ``eval_every``
steps, at each epoch's end and at the end of training, and the ablations
(:mod:`transformer_book.analysis.ablation`) call it and :func:`greedy_bleu` directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from transformer_book.data.batching import TokenBudgetSampler
from transformer_book.data.tokenizer import PAD_ID
from transformer_book.inference.evaluation import Evaluation, evaluate
from transformer_book.inference.trained import TrainedModel
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.run.config import RunConfig
from transformer_book.train.corpus import PreparedData, make_batch
from transformer_book.train.objective import label_smoothed_cross_entropy
from transformer_book.train.runtime import autocast
from transformer_book.util.validation import require, require_positive_int

__all__ = ["EVAL_MIN_TOKENS", "ValidationLoss", "validate", "validation_bleu", "validation_loss"]

EVAL_MIN_TOKENS = 4096  # smallest token budget of an evaluation batch


@dataclass(frozen=True)
class ValidationLoss:
    """Losses per target token over a set of pairs: ``loss`` label-smoothed (as trained),
    ``nll`` without smoothing (comparable across ε_ls), over ``tokens`` target tokens."""

    loss: float
    nll: float
    tokens: int

    @property
    def perplexity(self) -> float:
        """exp(nll), the paper's "perplexity per wordpiece" (capped at e^50)."""
        return math.exp(min(self.nll, 50.0))


@torch.no_grad()
def validation_loss(model: nn.Module, src: list[list[int]], tgt: list[list[int]], *,
                    label_smoothing: float, max_tokens: int, device: torch.device,
                    precision: str = "fp32") -> ValidationLoss:
    """The label-smoothed loss (Section 5.4) and the plain NLL per target token of
    ``model`` on the pairs ``(src[i], tgt[i])``, teacher-forced.

    The pairs go in length-sorted batches of at most ``max_tokens`` tokens per side, under
    autocast for ``precision``; each batch's summed losses (0-d tensors) stay on the
    device until one read at the end, and are added up in float64 in the batches' order.
    The model's mode is restored afterwards.
    """
    require_positive_int(max_tokens, "max_tokens")
    was_training = model.training
    model.eval()
    sampler = TokenBudgetSampler([len(s) for s in src], max_tokens,
                                 [len(t) + 1 for t in tgt], shuffle=False)
    sums, tokens = [], 0
    for indices in sampler:
        src_ids, tgt_in, tgt_out = make_batch(src, tgt, indices, device)
        with autocast(precision, device):
            logits = model(src_ids, tgt_in)  # (B, S), (B, T) -> (B, T, V)
        logits = logits.float()
        for eps in (label_smoothing, 0.0):
            sums.append(label_smoothed_cross_entropy(logits, tgt_out, eps, PAD_ID,
                                                     reduction="sum", check=False))
        tokens += sum(len(tgt[i]) + 1 for i in indices)  # y + <eos>, from the id lists
    model.train(was_training)
    values = torch.stack(sums).tolist() if sums else []  # the one synchronisation
    smoothed, nll = sum(values[0::2]), sum(values[1::2])
    return ValidationLoss(smoothed / tokens, nll / tokens, tokens)


def validation_bleu(model: nn.Module, data: PreparedData, sentences: int, *,
                    run_config: RunConfig, max_tokens: int, precision: str = "fp32"
                    ) -> Evaluation:
    """sacreBLEU of the translations of the first ``sentences`` val sources against their
    references, through :func:`~transformer_book.inference.evaluation.evaluate`, decoded by
    the strategy ``run_config``'s ``[train] bleu_strategy`` names (default greedy: Section
    6.1 decodes with beam search, greedy is the cheap check during training), with its
    ``[decode]`` settings: BLEU alone, no chrF++, TER or bootstrap interval.

    ``model`` (a :class:`~transformer_book.nn.transformer.Transformer`, on its device) is
    decoded under autocast for ``precision``, in batches of at most ``max_tokens`` source
    tokens, each output at most ``max_len_a · |x| + max_len_b`` tokens (``run_config``'s
    ``[decode]``). The sources are ``data.val_src`` as text: byte-level BPE gives back the
    exact sentences they were encoded from, so they are encoded to the same ids again.
    """
    require(isinstance(model, Transformer), "model", "a transformer_book Transformer",
            type(model).__name__)
    assert isinstance(model, Transformer), "checked just above"
    require_positive_int(sentences, "sentences")
    trained = TrainedModel(model=model, tokenizer=data.tokenizer, model_config=model.config,
                           run_config=run_config)
    sources = data.tokenizer.decode_batch(data.val_src[:sentences])
    with autocast(precision, next(model.parameters()).device):
        return evaluate(trained, sources, data.val_references[:sentences],
                        strategy=run_config.train.bleu_strategy, max_tokens=max_tokens,
                        other_metrics=False, resamples=None)


def validate(model: nn.Module, data: PreparedData, run_config: RunConfig,
             config: TransformerConfig, device: torch.device, precision: str,
             bleu_sentences: int) -> dict[str, Any]:
    """Validation loss (label-smoothed, as trained, and plain NLL, per target token) and
    greedy BLEU on the first ``bleu_sentences`` val sentences.

    Returns ``{"val_loss", "val_nll", "val_ppl"}`` and, when ``bleu_sentences > 0``,
    ``bleu``, ``bleu_signature``, ``bleu_lowercase_intl``, its signature,
    ``bleu_sentences`` and ``bleu_decoding``. The model's mode is restored afterwards.
    """
    # No gradients to keep: evaluation batches may be larger than training ones.
    budget = max(2 * run_config.data.max_tokens, EVAL_MIN_TOKENS)
    losses = validation_loss(model, data.val_src, data.val_tgt,
                             label_smoothing=config.label_smoothing, max_tokens=budget,
                             device=device, precision=precision)
    result: dict[str, Any] = {"val_loss": losses.loss, "val_nll": losses.nll,
                              "val_ppl": losses.perplexity}
    n = min(bleu_sentences, len(data.val_src))
    if n > 0:
        scores = validation_bleu(model, data, n, run_config=run_config, max_tokens=budget,
                                 precision=precision).scores
        result.update(bleu=scores.bleu, bleu_signature=scores.bleu_signature,
                      bleu_lowercase_intl=scores.bleu_lowercase_intl,
                      bleu_lowercase_intl_signature=scores.bleu_lowercase_intl_signature,
                      bleu_sentences=n, bleu_decoding=run_config.train.bleu_strategy)
    return result
