"""Synthetic tasks small enough to learn on a laptop CPU in seconds.

- **copy / reverse / sort**: map a random token sequence to itself, its reverse, or its
  sorted version. A model that learns them must move information between positions, the
  job attention does ("relating different positions of a single sequence", Section 2).
- **story QA** (in the style of bAbI, Weston et al. 2015): "Mary went to the kitchen.
  John went to the garden. Mary went to the office. Where is Mary?" -> "office". Section 2
  of the paper: "End-to-end memory networks are based on a recurrent attention mechanism
  instead of sequence-aligned recurrence and have been shown to perform well on
  simple-language question answering ... tasks"; chapter 04 builds one on these stories.

Token ids start at 4 so the specials ``<pad> <bos> <eos> <unk>`` (0-3) stay reserved.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

import torch

from transformer_book.data.batching import collate_pairs, pad_sequences
from transformer_book.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID
from transformer_book.util.validation import (
    require,
    require_int,
    require_one_of,
    require_positive_int,
)

__all__ = [
    "FIRST_TOKEN_ID",
    "PEOPLE",
    "PLACES",
    "TOY_TASKS",
    "StoryQA",
    "StoryTensors",
    "encode_stories",
    "encode_story",
    "letters",
    "make_story_qa",
    "make_toy_task",
    "require_examples",
    "story_vocabulary",
    "story_words",
    "toy_batches",
]

TOY_TASKS: tuple[str, ...] = ("copy", "reverse", "sort")
#: The smallest id a toy token may take; 0-3 are ``<pad> <bos> <eos> <unk>``.
FIRST_TOKEN_ID = len(SPECIAL_TOKENS)

Example = tuple[list[int], list[int]]


def require_examples(examples: Sequence[Example], vocab_size: int | None = None) -> None:
    """A non-empty list of ``(source ids, target ids)`` pairs, neither side empty, and with
    ``vocab_size`` every id in ``[0, vocab_size)``; otherwise a
    :class:`~transformer_book.util.validation.BookError` naming ``examples``.

    The training and evaluation functions of the toy models call it once, on the Python
    lists, so that their ``forward`` needs no value check (which would read the device).
    """
    require(len(examples) > 0, "examples", "a non-empty list of (src, tgt) pairs", "[]")
    require(all(len(src) > 0 and len(tgt) > 0 for src, tgt in examples), "examples",
            "non-empty src and tgt lists", "an empty sequence")
    if vocab_size is not None:
        ids = {i for src, tgt in examples for i in (*src, *tgt)}
        low, high = min(ids), max(ids)
        require(low >= 0 and high < vocab_size, "examples", f"ids in [0, {vocab_size})",
                f"ids in [{low}, {high}]")


def letters(ids: Iterable[int], pad: str = SPECIAL_TOKENS[PAD_ID]) -> list[str]:
    """Toy token ids as letters, for printing: 4 -> ``"a"``, 5 -> ``"b"``, ... (16 ids: a-l).

    The specials 0-3 keep their names (``<pad> <bos> <eos> <unk>``); ``pad`` replaces the
    name of id 0 (chapter 08 writes its label "no answer" as ``"·"``).
    ``letters([4, 5, 2])`` -> ``["a", "b", "<eos>"]``.
    """
    names = {**dict(enumerate(SPECIAL_TOKENS)), PAD_ID: pad}
    return [names[i] if i in names else chr(ord("a") + i - FIRST_TOKEN_ID) for i in ids]


def make_toy_task(
    name: str,
    num_examples: int,
    min_len: int = 1,
    max_len: int = 10,
    vocab_size: int = 16,
    seed: int = 0,
    exclude: Collection[Sequence[int]] = (),
) -> list[Example]:
    """Random ``(source, target)`` id lists for the copy, reverse or sort task.

    Sources have a length drawn uniformly from ``[min_len, max_len]`` and tokens drawn
    uniformly from ``[4, vocab_size)``; the target is the source copied, reversed or
    sorted (ascending). The same ``seed`` gives the same examples. A source listed in
    ``exclude`` is drawn again, so a training set made with ``exclude`` set to a held-out
    set's sources is disjoint from it by construction (two seeds alone are not: short
    sources repeat).

    Args:
        name: ``"copy"``, ``"reverse"`` or ``"sort"``.
        num_examples: how many pairs.
        min_len, max_len: length range of the sources (1 <= min_len <= max_len).
        vocab_size: total ids including the 4 specials, so >= 5.
        seed: random seed.
        exclude: sources that must not be drawn.
    """
    require_one_of(name, "name", TOY_TASKS)
    require_positive_int(num_examples, "num_examples")
    require_positive_int(min_len, "min_len")
    require_positive_int(max_len, "max_len")
    require(min_len <= max_len, "min_len", f"at most max_len={max_len}", min_len)
    require_int(vocab_size, "vocab_size", minimum=FIRST_TOKEN_ID + 1)
    transforms: dict[str, Callable[[list[int]], list[int]]] = {
        "copy": list, "reverse": lambda s: s[::-1], "sort": sorted}
    transform = transforms[name]
    excluded = {tuple(source) for source in exclude}
    symbols = vocab_size - FIRST_TOKEN_ID
    left = sum(symbols**n - sum(len(s) == n for s in excluded)
               for n in range(min_len, max_len + 1))
    require(left > 0, "exclude", "to leave at least one source of the lengths asked for",
            f"all {len(excluded)} of them excluded")
    rng = random.Random(seed)
    examples: list[Example] = []
    while len(examples) < num_examples:
        length = rng.randint(min_len, max_len)
        source = [rng.randrange(FIRST_TOKEN_ID, vocab_size) for _ in range(length)]
        if excluded and tuple(source) in excluded:
            continue  # drawn again: this source is held out
        examples.append((source, list(transform(source))))
    return examples


def toy_batches(
    examples: Sequence[Example], batch_size: int, add_bos_eos: bool = True
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Cut ``examples`` into consecutive padded batches ``(src (B, S), tgt (B, T))``.

    With ``add_bos_eos`` each target becomes ``<bos> y <eos>`` (see
    :func:`~transformer_book.data.batching.collate_pairs`); the last batch may be smaller.
    """
    require(len(examples) > 0, "examples", "at least one (source, target) pair", "none")
    require_positive_int(batch_size, "batch_size")
    specials = {"bos_id": BOS_ID, "eos_id": EOS_ID} if add_bos_eos else {}
    return [
        collate_pairs(examples[start : start + batch_size], PAD_ID, **specials)
        for start in range(0, len(examples), batch_size)
    ]


# ------------------------------------------------------------------------------ story QA
PEOPLE: tuple[str, ...] = (
    "Mary", "John", "Sandra", "Daniel", "Alice", "Bob", "Emma", "Fred", "Julie", "Bill",
)
PLACES: tuple[str, ...] = (
    "kitchen", "garden", "office", "bathroom", "hallway",
    "bedroom", "park", "school", "cinema", "cellar",
)


@dataclass(frozen=True)
class StoryQA:
    """One story: its sentences, a question, the answer and the supporting sentence.

    ``sentences[support]`` is the last sentence about the person asked for; it alone
    holds the answer, so a model must find it among sentences about the same person.
    """

    sentences: tuple[str, ...]
    question: str
    answer: str
    support: int

    def __str__(self) -> str:
        return " ".join(self.sentences) + f" {self.question} -> {self.answer}"


def make_story_qa(
    num_stories: int,
    num_people: int = 4,
    num_places: int = 6,
    sentences_per_story: int = 6,
    seed: int = 0,
) -> list[StoryQA]:
    """Generate "X went to the Y." stories, each ending with "Where is X?".

    Every sentence moves a random person to a random place other than where they are;
    the question asks about a person who appears in the story, and the answer is the
    place of their *last* move. Deterministic for a given ``seed``.

    Args:
        num_stories: how many stories.
        num_people: size of the cast, 1 to 10 (:data:`PEOPLE`).
        num_places: number of places, 2 to 10 (:data:`PLACES`).
        sentences_per_story: sentences before the question (the memory size).
        seed: random seed.
    """
    require_positive_int(num_stories, "num_stories")
    require_int(num_people, "num_people", minimum=1, maximum=len(PEOPLE))
    require_int(num_places, "num_places", minimum=2, maximum=len(PLACES))
    require_positive_int(sentences_per_story, "sentences_per_story")
    rng = random.Random(seed)
    people, places = PEOPLE[:num_people], PLACES[:num_places]
    stories: list[StoryQA] = []
    for _ in range(num_stories):
        where: dict[str, str] = {}
        last: dict[str, int] = {}
        sentences: list[str] = []
        for index in range(sentences_per_story):
            person = rng.choice(people)
            place = rng.choice([p for p in places if p != where.get(person)])
            where[person], last[person] = place, index
            sentences.append(f"{person} went to the {place}.")
        person = rng.choice(sorted(where, key=people.index))
        question = f"Where is {person}?"
        stories.append(StoryQA(tuple(sentences), question, where[person], last[person]))
    return stories


def story_words(text: str) -> list[str]:
    """Lower-case words: ``"Where is Mary?"`` -> ``["where", "is", "mary"]``."""
    return re.findall(r"[a-z]+", text.lower())


def story_vocabulary(stories: Sequence[StoryQA]) -> dict[str, int]:
    """Word -> id for every word in ``stories`` (specials at 0-3, then words sorted)."""
    require(len(stories) > 0, "stories", "at least one StoryQA", "none")
    words: set[str] = set()
    for story in stories:
        for text in (*story.sentences, story.question, story.answer):
            words.update(story_words(text))
    return {token: i for i, token in enumerate([*SPECIAL_TOKENS, *sorted(words)])}


def _ids(text: str, vocab: dict[str, int]) -> list[int]:
    return [vocab.get(word, UNK_ID) for word in story_words(text)]


def encode_story(
    story: StoryQA, vocab: dict[str, int]
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """One story as a bag-of-words memory: ``(memory (S, W), question (Q,), answer id)``.

    Row ``i`` of ``memory`` holds the word ids of sentence ``i``, right-padded with
    ``<pad>`` to the longest sentence; unknown words become ``<unk>``.
    """
    memory = pad_sequences([_ids(s, vocab) for s in story.sentences], PAD_ID)  # (S, W)
    question = torch.tensor(_ids(story.question, vocab), dtype=torch.long)  # (Q,)
    return memory, question, vocab.get(story.answer, UNK_ID)


@dataclass(frozen=True)
class StoryTensors:
    """A batch of encoded stories.

    Attributes:
        memory: ``(N, S, W)`` word ids, sentence ``s`` of story ``n`` in ``memory[n, s]``.
        question: ``(N, Q)`` word ids of the questions.
        answer: ``(N,)`` vocabulary id of each answer word.
        support: ``(N,)`` index of the sentence that holds the answer.
    """

    memory: torch.Tensor
    question: torch.Tensor
    answer: torch.Tensor
    support: torch.Tensor


def encode_stories(stories: Sequence[StoryQA], vocab: dict[str, int]) -> StoryTensors:
    """Encode ``stories`` as padded tensors (see :class:`StoryTensors` for the shapes).

    Stories with fewer sentences get all-``<pad>`` memory rows at the end.
    """
    require(len(stories) > 0, "stories", "at least one StoryQA", "none")
    encoded = [encode_story(story, vocab) for story in stories]
    num_sentences = max(memory.shape[0] for memory, _, _ in encoded)
    num_words = max(memory.shape[1] for memory, _, _ in encoded)
    memory = torch.full((len(stories), num_sentences, num_words), PAD_ID, dtype=torch.long)
    for n, (story_memory, _, _) in enumerate(encoded):
        s, w = story_memory.shape
        memory[n, :s, :w] = story_memory  # (S_n, W_n) into (S, W)
    question = pad_sequences([q.tolist() for _, q, _ in encoded], PAD_ID)  # (N, Q)
    answer = torch.tensor([a for _, _, a in encoded], dtype=torch.long)  # (N,)
    support = torch.tensor([story.support for story in stories], dtype=torch.long)  # (N,)
    return StoryTensors(memory, question, answer, support)
