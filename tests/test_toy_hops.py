"""Two-supporting-fact stories and the hop-count experiment of chapter 04."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from transformer_book.baselines.memory_network import MemoryNetwork
from transformer_book.toy.hops import (
    HopsConfig,
    TwoFactStory,
    evaluate_hops,
    hops_data,
    make_two_fact_qa,
    run_hops,
    train_hops,
)
from transformer_book.util.validation import BookError

MOVE = re.compile(r"(\w+) went to the (\w+)\.")
PICKUP = re.compile(r"(\w+) picked up the (\w+)\.")


def answer_by_reading(story: TwoFactStory) -> tuple[str, int, int]:
    """The answer, its sentence and the pick-up sentence, found by simulating the story."""
    thing = story.question.removeprefix("Where is the ").removesuffix("?")
    holder, taken = next((m.group(1), i) for i, s in enumerate(story.sentences)
                         if (m := PICKUP.fullmatch(s)) and m.group(2) == thing)
    moves = [(i, m.group(2)) for i, s in enumerate(story.sentences)
             if (m := MOVE.fullmatch(s)) and m.group(1) == holder]
    index, place = moves[-1]
    return place, index, taken


def test_stories_need_both_facts_and_no_sentence_gives_the_answer_alone():
    stories = make_two_fact_qa(300, num_people=4, num_places=6, num_objects=2,
                               sentences_per_story=8, seed=3)
    assert stories == make_two_fact_qa(300, num_people=4, num_places=6, num_objects=2,
                                       sentences_per_story=8, seed=3)
    for story in stories:
        assert len(story.sentences) == 8
        assert all(MOVE.fullmatch(s) or PICKUP.fullmatch(s) for s in story.sentences)
        place, index, taken = answer_by_reading(story)
        assert (story.answer, story.support, story.first_support) == (place, index, taken)
        thing = story.question.split()[-1].rstrip("?")
        # the answer sentence does not name the object; the pick-up sentence names no place
        assert thing not in story.sentences[story.support]
        assert not any(p in story.sentences[story.first_support] for p in ("went", place))
        # each object is picked up exactly once, by a different person
        holders = [PICKUP.fullmatch(s).group(1) for s in story.sentences if PICKUP.fullmatch(s)]
        assert len(holders) == 2 == len(set(holders))
        # a move never goes to where the person already is
        where: dict[str, str] = {}
        for s in story.sentences:
            if m := MOVE.fullmatch(s):
                assert where.get(m.group(1)) != m.group(2)
                where[m.group(1)] = m.group(2)


def test_hops_data_encodes_both_supports():
    config = HopsConfig(train_stories=40, test_stories=20)
    data = hops_data(config, seed=2)
    assert data.train.memory.shape[:2] == (40, config.sentences)
    assert data.test.answer.shape == data.first_support.shape == (20,)
    for n, story in enumerate(data.test_stories):
        assert int(data.first_support[n]) == story.first_support
        assert int(data.test.support[n]) == story.support
        assert int(data.test.answer[n]) == data.vocab[story.answer]


def test_linear_start_uses_the_raw_scores_and_training_switches_it_off():
    data = hops_data(HopsConfig(train_stories=30, test_stories=10))
    torch.manual_seed(0)
    network = MemoryNetwork(len(data.vocab), 8, num_hops=2, max_sentences=8)
    network.linear = True
    _, raw = network(data.test.memory, data.test.question)
    assert not torch.allclose(raw.sum(-1), torch.ones(10, 2))  # scores, not a distribution
    network.linear = False
    _, soft = network(data.test.memory, data.test.question)
    torch.testing.assert_close(soft.sum(-1), torch.ones(10, 2))
    losses = train_hops(network, data.train, HopsConfig(steps=6, linear_steps=4), seed=1)
    assert len(losses) == 6 and network.linear is False


def test_evaluate_hops_counts_answers_and_where_the_hops_look():
    data = hops_data(HopsConfig(train_stories=30, test_stories=12))

    class Oracle(MemoryNetwork):
        """Answers right and looks at the pick-up, then at the answer sentence."""

        def forward(self, story, question):
            logits = torch.nn.functional.one_hot(data.test.answer, self.vocab_size).float()
            hops = torch.zeros(story.shape[0], 2, story.shape[1])
            hops[torch.arange(12), 0, data.first_support] = 1.0
            hops[torch.arange(12), 1, data.test.support] = 1.0
            return logits, hops

    metrics = evaluate_hops(Oracle(len(data.vocab), 4, num_hops=2, max_sentences=8), data)
    assert metrics == {"answer_accuracy": 1.0, "first_hop_on_pickup": 1.0,
                       "last_hop_on_answer": 1.0}


@pytest.mark.slow
def test_two_hops_answer_where_one_cannot():
    config = HopsConfig(train_stories=2000, test_stories=300)
    data = hops_data(config)
    _, one = run_hops(1, 0, config, data)
    _, two = run_hops(2, 0, config, data)
    assert two["answer_accuracy"] > 0.9 > 0.6 > one["answer_accuracy"]
    assert two["first_hop_on_pickup"] > 0.9 and two["last_hop_on_answer"] > 0.9


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: make_two_fact_qa(5, num_objects=5), "num_objects: expected an integer"),
        (lambda: make_two_fact_qa(5, num_people=1, num_objects=2), "num_people: expected"),
        (lambda: make_two_fact_qa(5, sentences_per_story=2), "sentences_per_story: expected"),
        (lambda: HopsConfig(steps=5, linear_steps=5), "linear_steps: expected an integer"),
        (lambda: train_hops(MemoryNetwork(20, 4), hops_data(
            HopsConfig(train_stories=5, test_stories=5)).train, {"steps": 1}),
         "config: expected a HopsConfig"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(BookError, match=match):
        call()


def test_config_is_plain_data():
    assert dataclasses.asdict(HopsConfig())["linear_steps"] == HopsConfig().linear_steps
