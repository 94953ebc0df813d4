"""The one training step and the one validation loss (Sections 5.3-5.4): each equals the same
computation written out by hand, reads the device once, and refuses a broken loss."""

from __future__ import annotations

import copy
import os
import sys

import pytest
import torch
import torch.nn.functional as F

from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.train.corpus import check_ids, make_batch, make_step_batch
from transformer_book.train.objective import make_optimizer
from transformer_book.train.step import NonFiniteLossError, Trainer, train_step
from transformer_book.train.validate import validation_loss
from transformer_book.util.validation import BookError

VOCAB, PAD = 24, 0
CPU = torch.device("cpu")


def _corpus(n=12, seed=0):
    """Made-up pairs of ids 3..VOCAB-1 (no specials), 1 to 6 tokens each."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 7, (2, n), generator=generator).tolist()
    src = [torch.randint(3, VOCAB, (k,), generator=generator).tolist() for k in lengths[0]]
    tgt = [torch.randint(3, VOCAB, (k,), generator=generator).tolist() for k in lengths[1]]
    return src, tgt


def _model(seed=0):
    torch.manual_seed(seed)
    config = TransformerConfig.preset("tiny", VOCAB, d_model=16, num_heads=2, d_ff=32,
                                      num_encoder_layers=1, num_decoder_layers=1, dropout=0.0,
                                      label_smoothing=0.1, max_len=32)
    return Transformer(config)


def _trainer(model, clip_norm=0.5):
    optimizer, scheduler = make_optimizer(model, 16, warmup_steps=3, factor=2.0)
    return Trainer(model, optimizer, scheduler, label_smoothing=0.1, clip_norm=clip_norm)


def _sgd(model):
    """Plain SGD with a halving schedule: its update is proportional to the gradient, so two
    equal gradients give equal weights (Adam's first step, ±lr whatever the gradient's size,
    would magnify rounding in the near-zero gradient of the key biases)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 0.5 ** k)


def test_train_step_equals_a_step_written_by_hand():
    src, tgt = _corpus()
    chunk = [[0, 1, 2, 3], [4, 5, 6]]  # two micro-batches: gradient accumulation
    model = _model()
    by_hand = copy.deepcopy(model)
    trainer = Trainer(model, *_sgd(model), label_smoothing=0.1, clip_norm=0.5)
    result = train_step(trainer, make_step_batch(src, tgt, chunk, CPU))

    optimizer, scheduler = _sgd(by_hand)
    total, tokens = 0.0, sum(len(tgt[i]) + 1 for part in chunk for i in part)
    for part in chunk:
        s, t_in, t_out = make_batch(src, tgt, part, CPU)
        logits = by_hand(s, t_in)  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), t_out.reshape(-1), ignore_index=PAD,
                               label_smoothing=0.1, reduction="sum") / tokens
        loss.backward()
        total += float(loss.detach())
    torch.nn.utils.clip_grad_norm_(by_hand.parameters(), 0.5)
    optimizer.step()
    scheduler.step()

    assert result.step == trainer.step == 1 and trainer.last_finite == (1, result.loss)
    assert result.loss == pytest.approx(total, rel=1e-6)
    assert result.lr == 0.5, "the rate this step was taken with"
    assert result.tokens == tokens + sum(len(src[i]) for part in chunk for i in part)
    for mine, theirs in zip(model.parameters(), by_hand.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
        assert mine.grad is None, "the gradients are cleared after the step"
    assert trainer.optimizer.param_groups[0]["lr"] == 0.25, "the schedule stepped too"


def test_the_gradient_is_the_mean_over_target_tokens_not_source_tokens():
    """Without clipping (which rescales any gradient to one norm) and under SGD (whose update
    is proportional to the gradient; Adam's is nearly blind to its scale), the update
    reveals which count divides the summed loss: the target tokens, <eos> included."""
    src, tgt = _corpus(seed=3)
    chunk = [[0, 1, 2], [3, 4, 5, 6, 7]]
    targets = sum(len(tgt[i]) + 1 for part in chunk for i in part)
    sources = sum(len(src[i]) for part in chunk for i in part)
    assert targets != sources, "the two counts differ, or the test could not tell them apart"
    model = _model(seed=1)
    by_hand = copy.deepcopy(model)
    train_step(Trainer(model, *_sgd(model), label_smoothing=0.1, clip_norm=None),
               make_step_batch(src, tgt, chunk, CPU))
    optimizer, _ = _sgd(by_hand)
    for part in chunk:
        s, t_in, t_out = make_batch(src, tgt, part, CPU)
        F.cross_entropy(by_hand(s, t_in).reshape(-1, VOCAB), t_out.reshape(-1),
                        ignore_index=PAD, label_smoothing=0.1, reduction="sum").div(
                            targets).backward()
    optimizer.step()
    for mine, theirs in zip(model.parameters(), by_hand.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)


def test_train_step_reads_the_device_once(monkeypatch):
    """On a GPU every read of a value (item, tolist, float(), int(), bool()) waits for the
    device: the training code has exactly one per step, the loss for the log and the
    non-finite check. (The model's forward reads masks only where that is free, a CPU
    tensor: tests/test_compile.py compiles it without a graph break; PyTorch's Adam reads
    its step counters, CPU tensors too.)"""
    src, tgt = _corpus()
    trainer = _trainer(_model())
    batch = make_step_batch(src, tgt, [[0, 1, 2], [3, 4]], CPU)
    reads = []
    for name in ("item", "tolist", "__float__", "__int__", "__bool__", "__index__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if f"{os.sep}transformer_book{os.sep}train{os.sep}" in caller:
                reads.append((_name, caller))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    result = train_step(trainer, batch)
    assert len(reads) == 1, reads
    assert result.step == 1


def test_a_nonfinite_loss_changes_nothing_and_says_where():
    src, tgt = _corpus()
    model = _model()
    trainer = _trainer(model)
    train_step(trainer, make_step_batch(src, tgt, [[0, 1]], CPU))
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))  # a broken weight: the loss is NaN
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(NonFiniteLossError, match=r"training loss became nan at step 2 .*the "
                       r"last finite loss was [\d.]+ at step 1\. Try a lower learning rate"):
        train_step(trainer, make_step_batch(src, tgt, [[2, 3]], CPU))
    assert issubclass(NonFiniteLossError, RuntimeError), "a run that diverged"
    assert not issubclass(NonFiniteLossError, ValueError), "not a bad-input error"
    assert trainer.step == 1, "no step was taken"
    for now, then in zip(model.parameters(), before, strict=True):
        torch.testing.assert_close(now, then, rtol=0, atol=0, equal_nan=True)
        assert now.grad is None, "the broken gradients are dropped"


def test_validation_loss_is_the_per_token_mean_by_hand():
    src, tgt = _corpus(n=10, seed=3)
    model = _model(seed=2)
    model.train()
    result = validation_loss(model, src, tgt, label_smoothing=0.1, max_tokens=20, device=CPU)
    assert model.training, "the model's mode is restored"
    smoothed = nll = 0.0
    model.eval()
    with torch.no_grad():
        for i in range(len(src)):  # one pair at a time, summed, then divided by the tokens
            s, t_in, t_out = make_batch(src, tgt, [i], CPU)
            logits = model(s, t_in)[0]  # (T, V)
            smoothed += float(F.cross_entropy(logits, t_out[0], label_smoothing=0.1,
                                              reduction="sum"))
            nll += float(F.cross_entropy(logits, t_out[0], reduction="sum"))
    tokens = sum(len(t) + 1 for t in tgt)
    assert result.tokens == tokens
    assert result.loss == pytest.approx(smoothed / tokens, rel=1e-5)
    assert result.nll == pytest.approx(nll / tokens, rel=1e-5)
    assert result.perplexity == pytest.approx(torch.tensor(nll / tokens).exp().item(), rel=1e-5)


def test_corpus_ids_are_checked_once_on_the_host():
    check_ids([[3, 4], [5]], 6, "sources")
    with pytest.raises(BookError, match=r"sources: expected ids in \[0, 6\), received ids "
                       r"from 3 to 6"):
        check_ids([[3, 4], [6]], 6, "sources")
    with pytest.raises(BookError, match=r"targets: expected no padding id \(0\) inside"):
        check_ids([[3, 0, 4]], 6, "targets")
