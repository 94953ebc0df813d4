"""Validation during training: the validation loss and greedy BLEU of the model being trained
(Section 6.2 of the paper reports both on the development set, newstest2013; ours is
Multi30k's val split).

The loop (:mod:`transformer_book.train.loop`) calls :func:`validate` every ``eval_every``
steps, at each epoch's end and at the end of training.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from transformer_book.data.batching import TokenBudgetSampler
from transformer_book.data.tokenizer import PAD_ID
from transformer_book.inference.translate import translate_ids
from transformer_book.nn.config import TransformerConfig
from transformer_book.run.config import RunConfig
from transformer_book.train.corpus import PreparedData, make_batch
from transformer_book.train.objective import label_smoothed_cross_entropy
from transformer_book.train.runtime import autocast

__all__ = ["EVAL_MIN_TOKENS", "validate"]

EVAL_MIN_TOKENS = 4096  # smallest token budget of an evaluation batch


@torch.no_grad()
def validate(model: nn.Module, data: PreparedData, run_config: RunConfig,
             config: TransformerConfig, device: torch.device, precision: str,
             bleu_sentences: int) -> dict[str, Any]:
    """Validation loss (label-smoothed, as trained, and plain NLL, per target token) and
    greedy BLEU on the first ``bleu_sentences`` val sentences.

    Returns ``{"val_loss", "val_nll", "val_ppl"}`` and, when ``bleu_sentences > 0``,
    ``bleu``, ``bleu_signature``, ``bleu_lowercase_intl``, its signature,
    ``bleu_sentences`` and ``bleu_decoding``. The model's mode is restored afterwards.
    """
    from transformer_book.inference.scoring import (
        corpus_bleu,  # imports train.checkpoint: not at top
    )

    was_training = model.training
    model.eval()
    # No gradients to keep: evaluation batches may be larger than training ones.
    budget = max(2 * run_config.data.max_tokens, EVAL_MIN_TOKENS)
    sampler = TokenBudgetSampler([len(s) for s in data.val_src], budget,
                                 [len(t) + 1 for t in data.val_tgt], shuffle=False)
    smoothed = nll = tokens = 0.0
    for indices in sampler:
        src, tgt_in, tgt_out = make_batch(data.val_src, data.val_tgt, indices, device)
        with autocast(precision, device):
            logits = model(src, tgt_in)  # (B, T, V)
        logits = logits.float()
        smoothed += float(label_smoothed_cross_entropy(
            logits, tgt_out, config.label_smoothing, PAD_ID, reduction="sum"))
        nll += float(label_smoothed_cross_entropy(logits, tgt_out, 0.0, PAD_ID, reduction="sum"))
        tokens += float((tgt_out != PAD_ID).sum())
    result: dict[str, Any] = {"val_loss": smoothed / tokens, "val_nll": nll / tokens,
                              "val_ppl": math.exp(min(nll / tokens, 50.0))}
    n = min(bleu_sentences, len(data.val_src))
    if n > 0:
        dec = run_config.decode
        with autocast(precision, device):
            hyps = translate_ids(model, data.val_src[:n], beam_size=1, max_len_a=dec.max_len_a,
                                 max_len_b=dec.max_len_b, max_tokens=budget,
                                 device=device)
        bleu = corpus_bleu(data.tokenizer.decode_batch(hyps) if hyps else [],
                           data.val_references[:n])
        result.update(bleu=bleu.score, bleu_signature=bleu.signature,
                      bleu_lowercase_intl=bleu.lowercase_intl_score,
                      bleu_lowercase_intl_signature=bleu.lowercase_intl_signature,
                      bleu_sentences=n, bleu_decoding="greedy")
    model.train(was_training)
    return result
