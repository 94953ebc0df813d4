"""Tests of the end-to-end memory network (Sukhbaatar et al., 2015)."""

from __future__ import annotations

import pytest
import torch

from transformer_book.baselines.memory_network import MemoryNetwork, position_encoding_weights
from transformer_book.data.toy import StoryTensors
from transformer_book.toy.fit import train_memory_network
from transformer_book.util.validation import BookError

PEOPLE = list(range(1, 7))  # ids 1..6
WENT = 7
PLACES = list(range(8, 14))  # ids 8..13
WHERE = 14
VOCAB = 15


def make_stories(n: int, sentences: int = 4, seed: int = 0):
    """'<person> went <place>' stories; 'where <person>' asks for that person's place."""
    g = torch.Generator().manual_seed(seed)
    people = torch.stack([torch.randperm(len(PEOPLE), generator=g)[:sentences] for _ in range(n)])
    places = torch.randint(0, len(PLACES), (n, sentences), generator=g)
    story = torch.stack(
        [people + PEOPLE[0], torch.full_like(people, WENT), places + PLACES[0]], dim=-1
    )  # (n, S, 3)
    story = torch.cat([story, torch.zeros(n, sentences, 1, dtype=torch.long)], dim=-1)  # a pad
    asked = torch.randint(0, sentences, (n,), generator=g)
    rows = torch.arange(n)
    question = torch.stack([torch.full((n,), WHERE), people[rows, asked] + PEOPLE[0]], dim=-1)
    answer = places[rows, asked] + PLACES[0]
    return story, question, answer


def test_adjacent_weight_tying_shares_parameters() -> None:
    net = MemoryNetwork(VOCAB, 8, num_hops=3, max_sentences=5)
    assert len(net.embeddings) == 4
    for k in range(1, 3):
        assert net.A(k + 1) is net.C(k)  # A^{k+1} = C^k
        assert net.A(k + 1).weight is net.C(k).weight
    assert net.A(1) is net.embeddings[0]  # B = A^1 is what embeds the question
    assert net.C(3).weight is net.embeddings[-1].weight  # W^T = C^K
    n_params = sum(p.numel() for p in net.parameters())
    assert n_params == 4 * VOCAB * 8 + 4 * 5 * 8  # K+1 tables and K+1 temporal rows


def test_answer_uses_the_last_output_embedding() -> None:
    torch.manual_seed(0)
    net = MemoryNetwork(VOCAB, 8, num_hops=2, max_sentences=4)
    story, question, _ = make_stories(3, sentences=4)
    logits, _ = net(story, question)
    with torch.no_grad():
        net.C(2).weight[WHERE] += 10.0  # changes W = C^K's row, so that logit moves
    logits2, _ = net(story, question)
    assert not torch.allclose(logits[:, WHERE], logits2[:, WHERE])


def test_attention_rows_sum_to_one_over_nonempty_sentences() -> None:
    torch.manual_seed(0)
    net = MemoryNetwork(VOCAB, 8, num_hops=3, max_sentences=6)
    story, question, _ = make_stories(4, sentences=4)
    story = torch.cat([story, torch.zeros(4, 2, 4, dtype=torch.long)], dim=1)  # 2 empty slots
    story[1, 1] = 0  # an empty sentence in the middle
    logits, hops = net(story, question)
    assert logits.shape == (4, VOCAB) and hops.shape == (4, 3, 6)
    torch.testing.assert_close(hops.sum(-1), torch.ones(4, 3))
    assert (hops[:, :, 4:] == 0).all() and (hops[1, :, 1] == 0).all()
    # trailing empty sentences change nothing
    logits_short, _ = net(story[:, :4], question)
    torch.testing.assert_close(logits, logits_short)
    # an entirely empty story: zero attention, no NaN
    logits_empty, hops_empty = net(torch.zeros(1, 3, 4, dtype=torch.long), question[:1])
    assert (hops_empty == 0).all() and torch.isfinite(logits_empty).all()


def test_pad_words_are_ignored() -> None:
    torch.manual_seed(0)
    net = MemoryNetwork(VOCAB, 8, num_hops=2, max_sentences=4, temporal_encoding=False)
    story, question, _ = make_stories(2)
    padded_story = torch.cat([story, torch.zeros(2, 4, 3, dtype=torch.long)], dim=-1)
    padded_question = torch.cat([question, torch.zeros(2, 5, dtype=torch.long)], dim=-1)
    torch.testing.assert_close(net(story, question)[0], net(padded_story, padded_question)[0])


def test_position_encoding_weights_follow_the_paper() -> None:
    ids = torch.tensor([[5, 6, 7, 0]])
    w = position_encoding_weights(ids, 4)
    assert w.shape == (1, 4, 4)
    big_j, d = 3, 4
    for j in range(1, 4):
        for k in range(1, 5):
            expected = (1 - j / big_j) - (k / d) * (1 - 2 * j / big_j)
            assert w[0, j - 1, k - 1].item() == pytest.approx(expected)
    assert (w[0, 3] == 0).all()


def story_tensors(n: int, seed: int) -> StoryTensors:
    story, question, answer = make_stories(n, seed=seed)
    return StoryTensors(story, question, answer, support=torch.zeros_like(answer))


@pytest.mark.slow
@pytest.mark.parametrize("position_encoding", [True, False])
def test_learns_the_story_task(position_encoding: bool) -> None:
    torch.manual_seed(0)
    net = MemoryNetwork(VOCAB, 32, num_hops=2, max_sentences=4,
                        position_encoding=position_encoding)
    losses = train_memory_network(net, story_tensors(2000, seed=1), steps=150, batch_size=100,
                                  lr=0.02)
    assert len(losses) == 150 and not net.training
    test_story, test_question, test_answer = make_stories(500, seed=2)
    with torch.no_grad():
        logits, hops = net(test_story, test_question)
    accuracy = (logits.argmax(-1) == test_answer).float().mean().item()
    assert accuracy > 0.95, accuracy
    # the first hop looks at the sentence about the person asked for
    asked = (test_story[:, :, 0] == test_question[:, 1:2]).float().argmax(-1)
    assert (hops[:, 0].argmax(-1) == asked).float().mean() > 0.9


def test_memory_network_rejects_bad_input() -> None:
    with pytest.raises(BookError, match=r"num_hops: expected an integer >= 1, received 0"):
        MemoryNetwork(VOCAB, 8, num_hops=0)
    net = MemoryNetwork(VOCAB, 8, num_hops=1, max_sentences=3)
    story, question, _ = make_stories(2, sentences=3)
    with pytest.raises(
        BookError,
        match=r"story: expected at most max_sentences=3 sentences, received 4",
    ):
        net(torch.cat([story, story[:, :1]], dim=1), question)
    with pytest.raises(BookError, match=r"question: expected batch size 2 \(as story\)"):
        net(story, question[:1])
    with pytest.raises(BookError, match=r"story: expected a 3-D tensor"):
        net(story[0], question)
    with pytest.raises(BookError, match=r"story: expected integer token ids"):
        net(story.float(), question)
    data = story_tensors(2, seed=0)
    bad = StoryTensors(data.memory, data.question + 20, data.answer, data.support)
    with pytest.raises(BookError, match=r"data: expected ids in \[0, 15\), received ids in"):
        train_memory_network(net, bad, steps=1)
    with pytest.raises(BookError, match="network: expected a MemoryNetwork"):
        train_memory_network(torch.nn.Linear(2, 2), data, steps=1)
    with pytest.raises(BookError, match="position_encoding: expected True or False"):
        MemoryNetwork(VOCAB, 8, position_encoding=1)
