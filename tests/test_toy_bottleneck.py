"""Chapter 02's bottleneck experiment: the data, teacher-forced and greedy scores checked
against the package's own scorers, one run scored at several step counts, bad input."""

from __future__ import annotations

import pytest
import torch

from transformer_book.baselines.seq2seq import Seq2SeqGRU, sequence_accuracy, token_accuracy
from transformer_book.data.tokenizer import BOS_ID
from transformer_book.toy.bottleneck import (
    BottleneckSetup,
    bottleneck_data,
    position_accuracy,
    score_bottleneck,
    train_and_score,
)
from transformer_book.toy.fit import fit, train_seq2seq
from transformer_book.util.validation import BookError

SMALL = BottleneckSetup(vocab_size=10, train_min=2, train_max=4, test_max=5,
                        train_examples=300, per_length=20, probe_length=4, embed_dim=8)


@pytest.fixture(scope="module")
def trained() -> tuple[Seq2SeqGRU, dict]:
    """A small GRU trained briefly on reverse: some positions right, some wrong."""
    train, held_out = bottleneck_data("reverse", SMALL)
    torch.manual_seed(0)
    model = Seq2SeqGRU(SMALL.vocab_size, embed_dim=8, hidden_dim=16)
    train_seq2seq(model, train, steps=60, batch_size=32, seed=0)
    return model, held_out


def test_the_data_share_sources_and_hold_out_unseen_ones():
    (copy_train, copy_test), (rev_train, rev_test) = (bottleneck_data(t, SMALL)
                                                      for t in ("copy", "reverse"))
    assert [s for s, _ in copy_train] == [s for s, _ in rev_train], "same sources, both tasks"
    assert all(t == s for s, t in copy_train) and all(t == s[::-1] for s, t in rev_train)
    seen = {tuple(s) for s, _ in rev_train}
    assert sorted(rev_test) == [2, 3, 4, 5]
    for length, pairs in rev_test.items():
        assert all(len(s) == length and tuple(s) not in seen for s, _ in pairs)
        assert [s for s, _ in pairs] == [s for s, _ in copy_test[length]]
    tiny = BottleneckSetup(vocab_size=6, train_min=2, train_max=3, test_max=4, per_length=5)
    assert sorted(bottleneck_data("copy", tiny)[1]) == [4], "the 4 and 8 shorter sources seen"


def test_scores_equal_the_package_scorers(trained):
    model, held_out = trained
    scores = score_bottleneck(model, held_out, SMALL.probe_length)
    pairs = [pair for group in held_out.values() for pair in group]
    assert scores["exact"] == pytest.approx(sequence_accuracy(model, pairs))
    for length, group in held_out.items():
        assert scores["greedy"][length] == pytest.approx(token_accuracy(model, group))
    assert 0 < scores["greedy"][4] < 1, "a model that is partly right (the test can tell)"
    assert scores["positions_greedy"] == pytest.approx(
        position_accuracy(model, held_out[4], teacher_forced=False))
    assert len(scores["positions_teacher_forced"]) == 4


def test_teacher_forced_reads_the_true_prefix(trained):
    model, held_out = trained
    pairs = held_out[4]
    src = torch.tensor([s for s, _ in pairs])
    tgt = torch.tensor([t for _, t in pairs])
    tgt_in = torch.cat([torch.full((len(pairs), 1), BOS_ID), tgt[:, :-1]], dim=1)
    with torch.no_grad():
        by_hand = (model(src, tgt_in).argmax(-1) == tgt).double().mean(0).tolist()
    assert position_accuracy(model, pairs, teacher_forced=True) == pytest.approx(by_hand)
    model.train()
    position_accuracy(model, pairs, teacher_forced=True)
    assert model.training, "the mode is restored"
    model.eval()


def test_a_run_scored_at_several_counts_equals_shorter_runs():
    data = bottleneck_data("copy", SMALL)
    long = train_and_score("copy", 8, [5, 12], seed=1, setup=SMALL, data=data)
    (short,) = train_and_score("copy", 8, [5], seed=1, setup=SMALL, data=data)
    assert [r["steps"] for r in long] == [5, 12]
    for key in ("exact", "teacher_forced", "greedy", "positions_teacher_forced", "loss"):
        assert long[0][key] == short[key], key
    assert long[1]["loss"] != short["loss"]
    assert long[0]["parameters"] == sum(p.numel() for p in Seq2SeqGRU(10, 8, 8).parameters())


def test_fit_calls_on_step_after_every_update():
    model = torch.nn.Linear(2, 1)
    seen = []
    fit(model, lambda g: model(torch.randn(4, 2, generator=g)).pow(2).mean(), steps=3,
        lr=0.1, on_step=seen.append)
    assert seen == [1, 2, 3]


@pytest.mark.parametrize(("call", "match"), [
    (lambda: bottleneck_data("sort", SMALL), "task: expected one of"),
    (lambda: train_and_score("copy", 8, [], seed=0, setup=SMALL), "steps: expected a non-empty"),
    (lambda: train_and_score("copy", 0, [1], seed=0, setup=SMALL), "hidden: expected"),
])
def test_bad_arguments(call, match):
    with pytest.raises(BookError, match=match):
        call()


def test_position_accuracy_wants_one_target_length(trained):
    model, held_out = trained
    with pytest.raises(BookError, match="examples: expected targets of one length"):
        position_accuracy(model, held_out[3] + held_out[4], teacher_forced=True)
