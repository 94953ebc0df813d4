"""The RNN bottleneck without confounds: chapter 02's experiment on a GRU encoder-decoder.

Bahdanau et al. (2015), Section 1: "a neural network needs to be able to compress all the
necessary information of a source sentence into a fixed-length vector". Chapter 02 trains a
:class:`~transformer_book.baselines.seq2seq.Seq2SeqGRU` without attention on the copy and
reverse tasks and scores it so that three confounds are separated:

- **greedy decoding against the bottleneck**: :func:`position_accuracy` scores each output
  position both *teacher forced* (the decoder reads the true previous tokens, so a position
  is scored on what the state holds) and *greedy* (it reads its own, so one mistake, a
  dropped or doubled token, shifts every later position);
- **distance against position**: reverse writes the last-read token first, copy the
  first-read token first (Sutskever et al., 2014, reversed their sources for this reason);
- **capacity against training**: :func:`train_and_score` scores one run after several step
  counts, so a sweep over the state size H and the steps tells a failure that more training
  fixes (trainability) from one that it does not (capacity).

Every run uses the data of :func:`bottleneck_data` (one training set, one held-out set) and
the optimiser of :func:`~transformer_book.toy.fit.train_seq2seq`; only the seed changes the
initial weights and the order of the batches. ``scripts/record_rnn_bottleneck.py`` records the
sweep into ``results/``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from transformer_book.baselines.seq2seq import Seq2SeqGRU
from transformer_book.data.tokenizer import BOS_ID, EOS_ID
from transformer_book.data.toy import Example, make_toy_task, require_examples
from transformer_book.toy.fit import train_seq2seq
from transformer_book.util.env import set_seed
from transformer_book.util.validation import require, require_int, require_one_of

__all__ = [
    "BOTTLENECK_TASKS",
    "BottleneckSetup",
    "bottleneck_data",
    "position_accuracy",
    "score_bottleneck",
    "train_and_score",
]

BOTTLENECK_TASKS: tuple[str, ...] = ("copy", "reverse")


@dataclass(frozen=True)
class BottleneckSetup:
    """Chapter 02's data and model sizes (everything but the task, H, steps and seed).

    Training sources have ``train_min``..``train_max`` tokens over ``vocab_size - 4``
    symbols; the held-out set has ``per_length`` sources of every length up to
    ``test_max`` (longer than any training source from ``train_max + 1``); ``probe_length``
    is the length whose output positions are scored one by one.
    """

    vocab_size: int = 14
    train_min: int = 3
    train_max: int = 12
    test_max: int = 16
    train_examples: int = 5000
    per_length: int = 100
    probe_length: int = 12
    embed_dim: int = 32
    batch_size: int = 64
    lr: float = 3e-3

    def as_dict(self) -> dict:
        return asdict(self)


def bottleneck_data(task: str, setup: BottleneckSetup = BottleneckSetup()
                    ) -> tuple[list[Example], dict[int, list[Example]]]:
    """``(training pairs, {length: held-out pairs})`` for ``"copy"`` or ``"reverse"``.

    The training set is drawn with seed 0; the held-out sources of length n with seed
    100 + n, leaving out any source that is also in the training set (and any length left
    with none). Both tasks see the
    same sources (only the targets differ), so copy and reverse are compared on equal inputs.
    """
    require_one_of(task, "task", BOTTLENECK_TASKS)
    train = make_toy_task(task, setup.train_examples, setup.train_min, setup.train_max,
                          vocab_size=setup.vocab_size, seed=0)
    seen = {tuple(source) for source, _ in train}
    held_out = {}
    for length in range(setup.train_min, setup.test_max + 1):
        candidates = make_toy_task(task, setup.per_length, length, length,
                                   vocab_size=setup.vocab_size, seed=100 + length)
        unseen = [(s, t) for s, t in candidates if tuple(s) not in seen]
        if unseen:  # a length whose every source was trained on has nothing to test
            held_out[length] = unseen
    return train, held_out


@torch.no_grad()
def _predictions(model: Seq2SeqGRU, examples: Sequence[Example], teacher_forced: bool
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """For pairs whose targets all have n tokens: ``right`` ``(N, n)``, whether each output
    position holds its target token, and ``stopped`` ``(N,)``, whether the row wrote
    ``<eos>`` right after n tokens (always True teacher forced, where no row stops)."""
    require_examples(examples, model.vocab_size)
    length = len(examples[0][1])
    require(all(len(t) == length for _, t in examples), "examples",
            f"targets of one length ({length})", "targets of several lengths")
    device = next(model.parameters()).device
    src = torch.tensor([s for s, _ in examples], device=device)  # (N, S)
    tgt = torch.tensor([t for _, t in examples], device=device)  # (N, n)
    was_training = model.training
    model.eval()
    if teacher_forced:
        tgt_in = torch.cat([torch.full_like(tgt[:, :1], BOS_ID), tgt[:, :-1]], dim=1)  # (N, n)
        predicted = model(src, tgt_in).argmax(dim=-1)  # (N, n, V) -> (N, n)
        stopped = torch.ones(len(examples), dtype=torch.bool, device=device)
    else:
        tokens, _ = model.greedy_decode(src, max_len=length + 1, bos_id=BOS_ID, eos_id=EOS_ID)
        predicted = torch.full_like(tgt, EOS_ID)  # (N, n): unwritten positions count as wrong
        width = min(tokens.shape[1], length)
        predicted[:, :width] = tokens[:, :width]
        stopped = (tokens[:, length] == EOS_ID if tokens.shape[1] > length
                   else torch.zeros(len(examples), dtype=torch.bool, device=device))
    model.train(was_training)
    return predicted == tgt, stopped


def position_accuracy(model: Seq2SeqGRU, examples: Sequence[Example], *,
                      teacher_forced: bool) -> list[float]:
    """Accuracy at each output position 1..n of pairs whose targets all have n tokens.

    Teacher forced, the decoder reads ``<bos> y_1 .. y_{n-1}`` and position i is right when
    its most likely token is ``y_i``. Greedy, it reads back its own tokens
    (:meth:`~transformer_book.baselines.seq2seq.Seq2SeqGRU.greedy_decode`) and position i is
    right when the i-th token it wrote is ``y_i``; an output that stopped early is wrong
    at the positions it never wrote.
    """
    right, _ = _predictions(model, examples, teacher_forced)
    return right.double().mean(dim=0).tolist()  # (N, n) -> (n,)


def score_bottleneck(model: Seq2SeqGRU, held_out: dict[int, list[Example]],
                     probe_length: int) -> dict:
    """Every score of one model on the held-out set ``{length: pairs}``.

    Returns ``exact`` ``{length: greedy exact match}`` (every token right, then ``<eos>``:
    :func:`~transformer_book.baselines.seq2seq.sequence_accuracy`'s count),
    ``teacher_forced`` and ``greedy`` ``{length: token accuracy}`` (the mean over
    positions), and ``positions_teacher_forced`` / ``positions_greedy``, the per-position
    accuracies at ``probe_length``.
    """
    require(probe_length in held_out, "probe_length", f"one of {sorted(held_out)}",
            probe_length)
    scores: dict = {"exact": {}, "teacher_forced": {}, "greedy": {}}
    for n, pairs in held_out.items():
        forced, _ = _predictions(model, pairs, teacher_forced=True)  # (N, n)
        greedy, stopped = _predictions(model, pairs, teacher_forced=False)  # (N, n), (N,)
        for mode, right in (("teacher_forced", forced), ("greedy", greedy)):
            scores[mode][n] = float(right.double().mean())
            if n == probe_length:
                scores[f"positions_{mode}"] = right.double().mean(dim=0).tolist()
        scores["exact"][n] = float((greedy.all(dim=1) & stopped).double().mean())
    return scores


def train_and_score(task: str, hidden: int, steps: Sequence[int], seed: int,
                    setup: BottleneckSetup = BottleneckSetup(), *,
                    data: tuple[list[Example], dict[int, list[Example]]] | None = None
                    ) -> list[dict]:
    """Train one ``Seq2SeqGRU(attention=False)`` with state size ``hidden`` for
    ``max(steps)`` steps and score it after each count in ``steps``.

    Adam's state and the batches are those of one continuous run, so the scores after 300
    steps of a 3,000-step run are those of a 300-step run (the learning rate is constant).
    ``set_seed(seed)`` fixes the initial weights and ``seed`` the batches, as chapter 02
    does. Returns one dict per step count: the configuration, the mean training loss of the
    last 20 steps, the seconds spent training so far and :func:`score_bottleneck`'s scores.
    """
    require_one_of(task, "task", BOTTLENECK_TASKS)
    hidden = require_int(hidden, "hidden", minimum=1)
    require(len(steps) > 0 and all(isinstance(s, int) and s >= 1 for s in steps), "steps",
            "a non-empty list of positive step counts", list(steps))
    require_int(seed, "seed", minimum=0)
    train, held_out = data if data is not None else bottleneck_data(task, setup)
    set_seed(seed)
    model = Seq2SeqGRU(setup.vocab_size, embed_dim=setup.embed_dim, hidden_dim=hidden)
    results: list[dict] = []
    clock = {"start": time.perf_counter(), "scoring": 0.0}

    def snapshot(done: int) -> None:
        if done not in steps:
            return
        begin = time.perf_counter()
        scores = score_bottleneck(model, held_out, setup.probe_length)
        results.append({
            "task": task, "hidden": hidden, "steps": done, "seed": seed,
            "parameters": sum(p.numel() for p in model.parameters()),
            "train_seconds": begin - clock["start"] - clock["scoring"], **scores})
        clock["scoring"] += time.perf_counter() - begin

    losses = train_seq2seq(model, train, steps=max(steps), batch_size=setup.batch_size,
                           lr=setup.lr, seed=seed, on_step=snapshot)
    for result in results:
        window = losses[max(0, result["steps"] - 20):result["steps"]]
        result["loss"] = sum(window) / len(window)
    return results
