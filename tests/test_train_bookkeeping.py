"""The training loop's bookkeeping: every evaluation has its checkpoint (so choosing by val
sees all of them, and the lowest-val checkpoints are the ones kept), and a step the fp16
scaler skips is no step (the step counter, eq. 3's schedule and ``max_steps`` count
updates; the skipped ones are counted apart).

The scaler is ``torch.amp.GradScaler("cpu")`` on fp32 gradients, made to overflow by an
infinite gradient on chosen steps. The loop tests train configs/tiny.toml, shrunk: slow."""

from __future__ import annotations

import json
import math

import pytest
import torch

from transformer_book.inference.trained import load_trained
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.run.checkpoint import list_checkpoints, load_checkpoint, read_step
from transformer_book.run.config import load_run_config
from transformer_book.train import loop as loop_module
from transformer_book.train import session as session_module
from transformer_book.train import step as step_module
from transformer_book.train.corpus import make_step_batch
from transformer_book.train.loop import train
from transformer_book.train.objective import make_optimizer, noam_lr
from transformer_book.train.step import NonFiniteLossError, Trainer, train_step

QUICK = dict(progress=False, results_dir=None, bleu_sentences=0, val_sentences=16)
CPU = torch.device("cpu")


def _config(multi30k_dir, max_steps, **train_changes):
    """configs/tiny.toml shrunk further: 64 pairs, 128-token batches (~10 steps an epoch)."""
    config = load_run_config("configs/tiny.toml")
    config.data.data_dir = str(multi30k_dir)
    config.data.train_subset = 64
    config.data.max_tokens = 128
    config.data.max_len = 32
    t = config.train
    t.max_steps, t.max_minutes = max_steps, None
    for key, value in train_changes.items():
        setattr(t, key, value)
    config.validate()
    return config


def _steps(run_dir):
    return [read_step(path) for path in list_checkpoints(run_dir)]


# ------------------------------------------------- every evaluation has its checkpoint


@pytest.mark.slow
def test_every_evaluation_has_a_checkpoint_holding_it(multi30k_dir, tmp_path):
    """Nothing pruned (keep_last and keep_best 100): each evaluation's step has a
    checkpoint written after it, end-of-epoch ones off the checkpoint_every grid included
    (pruning keeps those for their val loss only: keep_best)."""
    config = _config(multi30k_dir, 24, eval_every=5, checkpoint_every=8, keep_last=100,
                     keep_best=100)
    result = train(config, tmp_path / "out", **QUICK)
    evaluated = [e["step"] for e in result.evals]
    assert len(set(evaluated)) == len(evaluated), "a step is evaluated once"
    off_grid = [e for e in result.evals if e["step"] % 8 and e["reason"] == "end of epoch"]
    assert off_grid, "the case at issue: an end-of-epoch evaluation off the checkpoint grid"
    assert _steps(tmp_path / "out") == sorted({*evaluated, 8, 16, 24})
    for evaluation in result.evals:
        saved = load_checkpoint(tmp_path / "out" / f"step_{evaluation['step']:08d}")
        assert saved["extra"]["evals"][-1] == evaluation, "saved after its evaluation"


def _curve(step):
    """A val loss that falls to its lowest at step 11, then rises and wobbles: not monotone."""
    return 3.0 + 0.01 * (step - 11) ** 2 + 0.05 * math.sin(step)


@pytest.mark.slow
def test_best_val_picks_the_lowest_evaluation_and_its_neighbours(multi30k_dir, tmp_path,
                                                                  monkeypatch):
    """The loop's evaluations scored by a made-up val curve (lowest at step 11, between the
    checkpoint_every grid's steps): pruning keeps the newest 3 on the grid and the 5 of
    lowest val among all evaluations; best-val picks the lowest, best-val-5 averages around
    it; last-3 averages the grid's checkpoints, not the evaluations' between them."""

    def made_up(model, data, run_config, config, device, precision, bleu_sentences):
        step = len(result_steps) + 1  # called once per evaluation, in step order
        result_steps.append(step)
        return {"val_loss": _curve(step), "val_nll": _curve(step) - 0.5,
                "val_ppl": math.exp(_curve(step) - 0.5)}

    result_steps: list[int] = []
    monkeypatch.setattr(loop_module, "validate", made_up)
    config = _config(multi30k_dir, 30, eval_every=1, checkpoint_every=5, keep_last=3,
                     keep_best=5)
    result = train(config, tmp_path / "out", **QUICK)
    evals = result.evals
    assert [e["step"] for e in evals] == list(range(1, 31)), "eval_every 1: every step"
    assert [e["val_loss"] for e in evals] == [_curve(k) for k in range(1, 31)]
    lowest = sorted(evals, key=lambda e: e["val_loss"])[:5]
    kept = _steps(tmp_path / "out")
    assert kept == sorted({20, 25, 30} | {e["step"] for e in lowest}), \
        "the newest 3 on the grid and the 5 of lowest val loss, of every evaluation"

    best = load_trained(tmp_path / "out", select="best-val").selection
    assert best["chosen_step"] == lowest[0]["step"] == 11
    assert best["chosen_val_loss"] == min(e["val_loss"] for e in evals)
    around = load_trained(tmp_path / "out", select="best-val", average=5).selection
    last = load_trained(tmp_path / "out", select="last", average=3).selection
    assert last["averaged_steps"] == [20, 25, 30], "Section 6.1's regular checkpoints"
    assert around["averaged_steps"] == sorted(e["step"] for e in lowest) == [9, 10, 11, 12, 13]
    assert around["averaged_steps"] != last["averaged_steps"]


# ------------------------------------------------------------- a skipped step is no step


def _tiny_model(seed=0):
    torch.manual_seed(seed)
    config = TransformerConfig.preset("tiny", 24, d_model=16, num_heads=2, d_ff=32,
                                      num_encoder_layers=1, num_decoder_layers=1,
                                      dropout=0.0, label_smoothing=0.1, max_len=32)
    return Transformer(config)


WARMUP, FACTOR = 3, 2.0


def _trainer(model, scaler):
    optimizer, scheduler = make_optimizer(model, 16, warmup_steps=WARMUP, factor=FACTOR)
    return Trainer(model, optimizer, scheduler, 0.1, clip_norm=0.5, scaler=scaler)


def _batches(n, seed=0):
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n):
        src = [torch.randint(3, 24, (k,), generator=generator).tolist() for k in (3, 5, 2)]
        tgt = [torch.randint(3, 24, (k,), generator=generator).tolist() for k in (4, 2, 3)]
        batches.append(make_step_batch(src, tgt, [[0, 1, 2]], CPU))
    return batches


def _overflow_on(model, steps):
    """An infinite gradient (an fp16 overflow's) on the calls numbered in ``steps``
    (from 1); returns the call counter."""
    calls = {"n": 0}

    def hook(grad):
        return grad + float("inf") if calls["n"] in steps else grad

    model.generator.weight.register_hook(hook)
    return calls


def test_a_skipped_step_advances_neither_the_step_nor_the_schedule():
    """Six calls, the third skipped: five updates, the schedule five steps on, each
    update's lr eq. 3's at its number, and the weights those of the five batches alone."""
    model, batches = _tiny_model(), _batches(6)
    trainer = _trainer(model, torch.amp.GradScaler("cpu"))
    calls = _overflow_on(model, {3})
    results = []
    for batch in batches:
        calls["n"] += 1
        results.append(train_step(trainer, batch))
    assert [r.updated for r in results] == [True, True, False, True, True, True]
    assert [r.step for r in results] == [1, 2, 2, 3, 4, 5]
    assert trainer.step == 5 and trainer.skipped_steps == 1
    assert trainer.scheduler.last_epoch == trainer.step, "eq. 3 counts updates"
    updates = [r for r in results if r.updated]
    assert [r.lr for r in updates] == [noam_lr(k, 16, WARMUP, FACTOR) for k in range(1, 6)]
    assert results[2].lr == noam_lr(3, 16, WARMUP, FACTOR), "the rate step 3 was to use"
    assert trainer.optimizer.param_groups[0]["lr"] == noam_lr(6, 16, WARMUP, FACTOR)
    assert trainer.last_finite == (5, results[-1].loss)

    # The same five batches in fp32, without a scaler: bit for bit the same weights (a
    # power-of-two loss scale changes no rounding), so the skipped batch changed nothing.
    reference = _trainer(_tiny_model(), None)
    for k, batch in enumerate(batches):
        if k != 2:
            train_step(reference, batch)
    assert reference.step == 5 and reference.scheduler.last_epoch == 5
    for a, b in zip(model.parameters(), reference.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_scale_backed_off_below_one_stops_the_run():
    """Gradients that overflow at every scale: the scaler halves 2^16 until it falls below
    1 (17 skips), then the run stops with a diagnostic instead of skipping forever."""
    model = _tiny_model()
    trainer = _trainer(model, torch.amp.GradScaler("cpu"))
    calls = _overflow_on(model, range(1, 100))
    batch = _batches(1)[0]
    with pytest.raises(NonFiniteLossError, match=r"fp16 gradients: expected finite gradients "
                       r"at a loss scale >= 1, received inf/NaN at step 1 .*fell to 0\.5; "
                       r"17 step\(s\) skipped in all\. Try precision"):
        for _ in range(100):
            calls["n"] += 1
            train_step(trainer, batch)
    assert calls["n"] == 17 and trainer.step == 0 and trainer.skipped_steps == 17
    assert trainer.scheduler.last_epoch == 0


class _InfGrad(torch.autograd.Function):
    """The identity forward, an infinite gradient backward: an overflowed fp16 step."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * float("inf")


def _overflow_calls(monkeypatch, calls_to_poison):
    """The loss's gradient is infinite on the micro-batches numbered ``calls_to_poison``;
    the scaler is a CPU ``GradScaler``; returns the count of train_step calls."""
    real = step_module.label_smoothed_cross_entropy
    losses, steps = {"n": 0}, {"n": 0}

    def poisoned(*args, **kwargs):
        losses["n"] += 1
        loss = real(*args, **kwargs)
        return _InfGrad.apply(loss) if losses["n"] in calls_to_poison else loss

    real_step = loop_module.train_step

    def counted(*args, **kwargs):
        steps["n"] += 1
        return real_step(*args, **kwargs)

    monkeypatch.setattr(step_module, "label_smoothed_cross_entropy", poisoned)
    monkeypatch.setattr(loop_module, "train_step", counted)
    monkeypatch.setattr(session_module, "make_scaler",
                        lambda precision, device: torch.amp.GradScaler("cpu"))
    return steps


@pytest.mark.slow
def test_the_loop_stops_after_max_steps_updates_and_records_the_skipped(
        multi30k_dir, tmp_path, monkeypatch):
    """max_steps 12 with the 4th step skipped (right after step 3's evaluation): 13
    batches, 12 updates numbered 1..12, no evaluation twice, the schedule 12 steps on, the
    skipped step in the result, the record and the checkpoint; and a run interrupted after
    the skip resumes to the same losses and the same count."""
    config = _config(multi30k_dir, 12, eval_every=3, checkpoint_every=6, keep_last=10)
    steps = _overflow_calls(monkeypatch, {4})
    whole = train(config, tmp_path / "whole", **{**QUICK, "results_dir": tmp_path / "rec"})
    assert steps["n"] == 13 and whole.step == 12 and whole.skipped_steps == 1
    assert [e["step"] for e in whole.losses] == list(range(1, 13))
    t, d_model = config.train, config.model_config(500).d_model
    assert [e["lr"] for e in whole.losses] == [
        noam_lr(k, d_model, t.warmup_steps, t.lr_factor) for k in range(1, 13)]
    evaluated = [e["step"] for e in whole.evals]
    assert len(set(evaluated)) == len(evaluated) and {3, 6, 9, 12} <= set(evaluated)
    meta = load_checkpoint(whole.final_checkpoint)
    assert meta["extra"]["skipped_steps"] == 1 and meta["step"] == 12
    assert meta["extra"]["scaler"]["scale"] == 2.0**15, "the scale backed off once"
    saved = torch.load(whole.final_checkpoint / "optimizer.pt", weights_only=False)
    assert saved["scheduler"]["last_epoch"] == 12
    [record] = [json.loads(p.read_text()) for p in (tmp_path / "rec").glob("train-*.json")]
    assert record["skipped_steps"] == 1 and record["steps"] == 12

    # Interrupted at step 6 (the skip behind it), resumed without one: the same run.
    steps = _overflow_calls(monkeypatch, {4})
    first = train(_config(multi30k_dir, 6, eval_every=3, checkpoint_every=6, keep_last=10),
                  tmp_path / "split", **QUICK)
    assert steps["n"] == 7 and first.step == 6 and first.skipped_steps == 1
    steps = _overflow_calls(monkeypatch, set())
    second = train(config, tmp_path / "split", **QUICK)
    assert second.resumed_from.name == "step_00000006" and steps["n"] == 6
    assert second.step == 12 and second.skipped_steps == 1, "the count survives the resume"
    assert [e["loss"] for e in second.losses] == [e["loss"] for e in whole.losses]


# ------------------------------------------------- precision: measured once, kept on resume


@pytest.mark.slow
def test_auto_precision_is_recorded_and_a_resume_keeps_it(multi30k_dir, tmp_path, monkeypatch):
    """"auto" measures the machine and the record says what it chose and why; a resume does
    not measure again (a different verdict would refuse the resume or change the run)."""
    from transformer_book.train import runtime

    config = _config(multi30k_dir, 6, eval_every=3, checkpoint_every=3, keep_last=10)
    config.train.precision = "auto"
    # bf16 three times slower: fp32
    monkeypatch.setattr(runtime, "time_product", lambda precision, device, shape: (
        3e-10 if precision != "fp32" else 1e-10) * shape[0] * shape[1] * shape[2])
    first = train(config, tmp_path / "out", **{**QUICK, "results_dir": tmp_path / "rec"})
    [record] = [json.loads(p.read_text()) for p in (tmp_path / "rec").glob("train-*.json")]
    assert record["precision"] == "fp32" and record["precision_choice"]["asked"] == "auto"
    assert first.step == 6
    # now bf16 would look ten times faster: the resumed run stays in fp32 all the same
    monkeypatch.setattr(runtime, "time_product", lambda precision, device, shape: (
        1e-11 if precision != "fp32" else 1e-10) * shape[0] * shape[1] * shape[2])
    config.train.max_steps = 9
    second = train(config, tmp_path / "out", **QUICK)
    assert second.resumed_from.name == "step_00000006" and second.step == 9
    assert load_checkpoint(second.final_checkpoint)["extra"]["precision"] == "fp32"
