"""Synthetic copy/reverse/sort tasks and bAbI-style story QA."""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_book.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID
from transformer_book.data.toy import (
    FIRST_TOKEN_ID,
    StoryQA,
    encode_stories,
    encode_story,
    letters,
    make_story_qa,
    make_toy_task,
    require_examples,
    story_vocabulary,
    story_words,
    toy_batches,
)
from transformer_book.util.validation import BookError


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["copy", "reverse", "sort"]), min_len=st.integers(1, 8),
       extra=st.integers(0, 8), vocab_size=st.integers(5, 30), seed=st.integers(0, 10**6))
def test_toy_tasks(name: str, min_len: int, extra: int, vocab_size: int, seed: int) -> None:
    examples = make_toy_task(name, 20, min_len, min_len + extra, vocab_size, seed)
    assert examples == make_toy_task(name, 20, min_len, min_len + extra, vocab_size, seed)
    assert len(examples) == 20
    expected = {"copy": list, "reverse": lambda s: s[::-1], "sort": sorted}[name]
    for source, target in examples:
        assert min_len <= len(source) <= min_len + extra
        assert all(FIRST_TOKEN_ID <= t < vocab_size for t in source)
        assert target == expected(source)


def test_toy_seeds_differ() -> None:
    assert make_toy_task("copy", 10, seed=0) != make_toy_task("copy", 10, seed=1)


def test_toy_batches() -> None:
    examples = make_toy_task("reverse", 5, 2, 6, 12, seed=3)
    batches = toy_batches(examples, batch_size=2)
    assert [src.shape[0] for src, _ in batches] == [2, 2, 1]
    src, tgt = batches[0]
    (s0, t0), (s1, t1) = examples[:2]
    assert src.shape == (2, max(len(s0), len(s1)))
    assert tgt.shape == (2, max(len(t0), len(t1)) + 2)
    assert tgt[0, : len(t0) + 2].tolist() == [BOS_ID, *t0, EOS_ID]
    assert (tgt[0, len(t0) + 2 :] == PAD_ID).all()
    plain_src, plain_tgt = toy_batches(examples, batch_size=5, add_bos_eos=False)[0]
    assert plain_src.shape == plain_tgt.shape == (5, max(len(s) for s, _ in examples))
    assert plain_tgt[1, : len(t1)].tolist() == s1[::-1]


def test_story_qa_structure() -> None:
    stories = make_story_qa(50, num_people=3, num_places=4, sentences_per_story=5, seed=7)
    assert stories == make_story_qa(50, num_people=3, num_places=4, sentences_per_story=5, seed=7)
    needs_search = 0
    for story in stories:
        assert len(story.sentences) == 5
        assert all(re.fullmatch(r"[A-Z][a-z]+ went to the [a-z]+\.", s) for s in story.sentences)
        person = re.fullmatch(r"Where is ([A-Z][a-z]+)\?", story.question).group(1)
        mentions = [i for i, s in enumerate(story.sentences) if s.startswith(person + " ")]
        assert story.support == mentions[-1]
        assert story.sentences[story.support] == f"{person} went to the {story.answer}."
        needs_search += len(mentions) > 1
    assert needs_search > 10  # the person often moved more than once: the last move counts
    assert str(stories[0]).endswith(f"{stories[0].question} -> {stories[0].answer}")


def test_story_example_from_the_book() -> None:
    story = StoryQA(("Mary went to the kitchen.", "John went to the garden.",
                     "Mary went to the office."), "Where is Mary?", "office", 2)
    vocab = story_vocabulary([story])
    assert list(vocab)[:4] == list(SPECIAL_TOKENS)
    assert set(vocab) - set(SPECIAL_TOKENS) == {"mary", "went", "to", "the", "kitchen", "john",
                                                "garden", "office", "where", "is"}
    memory, question, answer = encode_story(story, vocab)
    assert memory.shape == (3, 5) and memory.dtype == torch.long
    assert memory[2].tolist() == [vocab[w] for w in story_words("Mary went to the office.")]
    assert question.tolist() == [vocab["where"], vocab["is"], vocab["mary"]]
    assert answer == vocab["office"]
    unknown = StoryQA(("Zed went to the moon.",), "Where is Zed?", "moon", 0)
    memory, _, answer = encode_story(unknown, vocab)
    assert memory[0].tolist().count(UNK_ID) == 2 and answer == UNK_ID


def test_encode_stories_batch() -> None:
    short = make_story_qa(3, sentences_per_story=2, seed=1)
    long = make_story_qa(4, sentences_per_story=6, seed=2)
    stories = short + long
    vocab = story_vocabulary(stories)
    batch = encode_stories(stories, vocab)
    assert batch.memory.shape == (7, 6, 5)
    assert batch.question.shape == (7, 3)
    assert batch.answer.shape == batch.support.shape == (7,)
    assert (batch.memory[:3, 2:] == PAD_ID).all()  # missing sentences are padding
    for n, story in enumerate(stories):
        assert batch.answer[n] == vocab[story.answer]
        assert batch.support[n] == story.support
        row = batch.memory[n, story.support]
        assert vocab[story.answer] in row.tolist()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "shuffle"}, r"name: expected one of \['copy', 'reverse', 'sort'\], "
                              r"received 'shuffle'"),
        ({"min_len": 5, "max_len": 3}, "min_len: expected at most max_len=3, received 5"),
        ({"min_len": 0}, "min_len: expected an integer >= 1, received 0"),
        ({"max_len": 0}, "max_len: expected an integer >= 1, received 0"),
        ({"vocab_size": 4}, "vocab_size: expected an integer >= 5, received 4"),
        ({"num_examples": 0}, "num_examples: expected an integer >= 1, received 0"),
    ],
)
def test_toy_bad_input(kwargs: dict[str, object], match: str) -> None:
    arguments: dict[str, object] = {"name": "copy", "num_examples": 3, **kwargs}
    with pytest.raises(ValueError, match=match):
        make_toy_task(**arguments)  # type: ignore[arg-type]


def test_story_bad_input() -> None:
    with pytest.raises(BookError, match="num_people: expected an integer >= 1 and <= 10, recei"):
        make_story_qa(1, num_people=11)
    with pytest.raises(BookError, match="num_places: expected an integer >= 2 and <= 10, recei"):
        make_story_qa(1, num_places=1)
    with pytest.raises(ValueError, match="sentences_per_story: expected an integer >= 1"):
        make_story_qa(1, sentences_per_story=0)
    with pytest.raises(ValueError, match="num_stories: expected an integer >= 1, received 0"):
        make_story_qa(0)
    with pytest.raises(ValueError, match="stories: expected at least one StoryQA"):
        story_vocabulary([])
    with pytest.raises(ValueError, match="stories: expected at least one StoryQA"):
        encode_stories([], {})
    with pytest.raises(ValueError, match="batch_size: expected an integer >= 1, received 0"):
        toy_batches(make_toy_task("copy", 2), batch_size=0)
    with pytest.raises(ValueError, match="examples: expected at least one"):
        toy_batches([], batch_size=2)


def test_letters_spell_toy_ids_and_name_the_specials() -> None:
    assert letters([4, 5, 15]) == ["a", "b", "l"]
    assert letters(range(4)) == list(SPECIAL_TOKENS)
    assert letters([0, 6, 0], pad="·") == ["·", "c", "·"]
    assert letters([]) == []


def test_require_examples() -> None:
    require_examples([([4, 5], [5, 4])], vocab_size=6)
    with pytest.raises(BookError, match="examples: expected a non-empty list"):
        require_examples([])
    with pytest.raises(BookError, match="examples: expected non-empty src and tgt lists"):
        require_examples([([4], [])])
    with pytest.raises(BookError, match=r"examples: expected ids in \[0, 6\), received ids in \[4"):
        require_examples([([4, 6], [6, 4])], vocab_size=6)


def test_two_seeds_overlap_but_exclude_makes_the_sets_disjoint():
    """Chapter 09's held-out set: another seed alone repeats short sources; ``exclude``
    keeps every held-out source out of the training set, and changes nothing else."""
    held_out = make_toy_task("reverse", 200, min_len=3, max_len=10, vocab_size=16, seed=2)
    sources = {tuple(s) for s, _ in held_out}
    plain = make_toy_task("reverse", 5000, min_len=3, max_len=10, vocab_size=16, seed=1)
    assert sources & {tuple(s) for s, _ in plain}, "the overlap the exclusion removes"
    train = make_toy_task("reverse", 5000, min_len=3, max_len=10, vocab_size=16, seed=1,
                          exclude=[s for s, _ in held_out])
    assert len(train) == 5000
    assert not sources & {tuple(s) for s, _ in train}, "no held-out source in training"
    assert all(t == s[::-1] for s, t in train), "still the reverse task"


def test_exclude_that_leaves_nothing_is_refused():
    every = [[a] for a in range(4, 6)]  # vocab_size 6: the only sources of length 1
    with pytest.raises(BookError, match="exclude"):
        make_toy_task("copy", 3, min_len=1, max_len=1, vocab_size=6, exclude=every)
    assert make_toy_task("copy", 3, min_len=1, max_len=1, vocab_size=6,
                         exclude=every[:1]) == [([5], [5])] * 3
