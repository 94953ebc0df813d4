"""How many hops does a memory network need? Two-supporting-fact stories (chapter 04).

Sukhbaatar et al. (2015), abstract: "the key concept of multiple computational hops yields
improved results". The stories of :func:`make_two_fact_qa` are in the style of bAbI's task 2,
"two supporting facts" (Weston et al., 2015): "Mary picked up the apple. ... Mary went to the
office. Where is the apple?" -> "office". The answer is in the holder's last move, a
sentence that does not name the object; which person to look for is only known after the
sentence that names the object has been read. No sentence states where an object is, so no
single fact holds the answer.

:func:`train_hops` trains a :class:`~transformer_book.baselines.memory_network.MemoryNetwork`
with the paper's linear start (Section 4.2), :func:`evaluate_hops` measures the answers and
where each hop looks, and :func:`run_hops` does both for one seed (the recording script
``scripts/record_memory_hops.py`` runs several; the chapter runs one live).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from transformer_book.baselines.memory_network import MemoryNetwork
from transformer_book.data.toy import (
    PEOPLE,
    PLACES,
    StoryQA,
    StoryTensors,
    encode_stories,
    story_vocabulary,
)
from transformer_book.toy.fit import train_memory_network
from transformer_book.util.validation import require, require_int, require_positive_int

__all__ = [
    "OBJECTS",
    "HopsConfig",
    "HopsData",
    "TwoFactStory",
    "evaluate_hops",
    "hops_data",
    "make_two_fact_qa",
    "run_hops",
    "train_hops",
]

OBJECTS: tuple[str, ...] = ("apple", "football", "milk", "book")


@dataclass(frozen=True)
class TwoFactStory(StoryQA):
    """A story whose answer needs two sentences.

    ``support`` (as in :class:`~transformer_book.data.toy.StoryQA`) is the holder's last
    move, the sentence that holds the answer; ``first_support`` is the sentence in which the
    holder picked up the object asked about, the one that says whose moves matter.
    """

    first_support: int


def _one_story(rng: random.Random, people: Sequence[str], places: Sequence[str],
               objects: Sequence[str], length: int) -> TwoFactStory | None:
    """One story, or None when no object's holder moves (the question has no answer)."""
    holders = rng.sample(list(people), len(objects))  # each object taken by another person
    pickups = dict(zip(rng.sample(range(length), len(objects)), range(len(objects)),
                       strict=True))  # sentence index -> object index
    where: dict[str, str] = {}
    last_move: dict[str, int] = {}
    taken_at: dict[str, int] = {}
    sentences: list[str] = []
    for index in range(length):
        if index in pickups:
            thing = pickups[index]
            taken_at[objects[thing]] = index
            sentences.append(f"{holders[thing]} picked up the {objects[thing]}.")
            continue
        person = rng.choice(list(people))
        where[person] = rng.choice([p for p in places if p != where.get(person)])
        last_move[person] = index
        sentences.append(f"{person} went to the {where[person]}.")
    askable = [i for i, holder in enumerate(holders) if holder in where]
    if not askable:
        return None
    thing = rng.choice(askable)
    holder = holders[thing]
    return TwoFactStory(tuple(sentences), f"Where is the {objects[thing]}?", where[holder],
                        last_move[holder], taken_at[objects[thing]])


def make_two_fact_qa(
    num_stories: int,
    num_people: int = 4,
    num_places: int = 6,
    num_objects: int = 2,
    sentences_per_story: int = 8,
    seed: int = 0,
) -> list[TwoFactStory]:
    """Stories of moves and pick-ups, each ending with "Where is the <object>?".

    Each of ``num_objects`` objects is picked up once, by a different person, at a random
    sentence; every other sentence moves a random person to a place other than where they
    are. The question asks about an object whose holder moves at least once, and the answer
    is the place of the holder's *last* move, before or after the pick-up (the holder carries
    the object). Deterministic for a given ``seed``.
    """
    require_positive_int(num_stories, "num_stories")
    require_int(num_objects, "num_objects", minimum=1, maximum=len(OBJECTS))
    require_int(num_people, "num_people", minimum=num_objects, maximum=len(PEOPLE))
    require_int(num_places, "num_places", minimum=2, maximum=len(PLACES))
    require_int(sentences_per_story, "sentences_per_story", minimum=num_objects + 1)
    rng = random.Random(seed)
    people, places, objects = PEOPLE[:num_people], PLACES[:num_places], OBJECTS[:num_objects]
    stories: list[TwoFactStory] = []
    while len(stories) < num_stories:
        story = _one_story(rng, people, places, objects, sentences_per_story)
        if story is not None:
            stories.append(story)
    return stories


@dataclass(frozen=True)
class HopsConfig:
    """The stories, the network and its training, shared by the script and the chapter.

    ``linear_steps`` of the ``steps`` are the linear start (no softmax in the hops).
    """

    num_people: int = 4
    num_places: int = 6
    num_objects: int = 2
    sentences: int = 8
    train_stories: int = 4000
    test_stories: int = 1000
    embed_dim: int = 20
    steps: int = 600
    linear_steps: int = 300
    batch_size: int = 64
    lr: float = 1e-2

    def __post_init__(self) -> None:
        require_positive_int(self.steps, "steps")
        require_int(self.linear_steps, "linear_steps", minimum=0, maximum=self.steps - 1)


@dataclass(frozen=True)
class HopsData:
    """Encoded train and test stories; ``first_support (N_test,)`` is each test story's
    pick-up sentence (``test.support`` its answer sentence)."""

    vocab: dict[str, int]
    train: StoryTensors
    test: StoryTensors
    test_stories: list[TwoFactStory]
    first_support: torch.Tensor


def hops_data(config: HopsConfig, seed: int = 0) -> HopsData:
    """Training stories from ``seed``, test stories from ``seed + 1``, one vocabulary."""
    story_args = {"num_people": config.num_people, "num_places": config.num_places,
                  "num_objects": config.num_objects,
                  "sentences_per_story": config.sentences}
    train = make_two_fact_qa(config.train_stories, **story_args, seed=seed)
    test = make_two_fact_qa(config.test_stories, **story_args, seed=seed + 1)
    vocab = story_vocabulary(train + test)
    first = torch.tensor([story.first_support for story in test], dtype=torch.long)
    return HopsData(vocab, encode_stories(train, vocab), encode_stories(test, vocab), test, first)


def train_hops(network: MemoryNetwork, data: StoryTensors, config: HopsConfig,
               seed: int = 0) -> list[float]:
    """Linear start, then the softmax (Sukhbaatar et al., Section 4.2); the losses of all steps.

    The paper re-inserts the softmax "when the validation loss stopped decreasing"; here
    after a fixed ``config.linear_steps``. Each phase is one
    :func:`~transformer_book.toy.fit.train_memory_network` (Adam, clipping at 40) with its
    own batches (seeds ``seed`` and ``seed + 1``).
    """
    require(isinstance(config, HopsConfig), "config", "a HopsConfig", type(config).__name__)
    losses: list[float] = []
    if config.linear_steps:
        network.linear = True
        losses += train_memory_network(network, data, config.linear_steps, config.batch_size,
                                       config.lr, seed=seed)
    network.linear = False
    losses += train_memory_network(network, data, config.steps - config.linear_steps,
                                   config.batch_size, config.lr, seed=seed + 1)
    return losses


@torch.no_grad()
def evaluate_hops(network: MemoryNetwork, data: HopsData) -> dict[str, float]:
    """On the test stories: the fraction answered right, and how often the first hop's
    largest weight is on the pick-up sentence and the last hop's on the answer sentence."""
    device = next(network.parameters()).device
    logits, hops = network(data.test.memory.to(device), data.test.question.to(device))
    hops = hops.cpu()  # (N, K, S)
    return {
        "answer_accuracy": float((logits.argmax(-1).cpu() == data.test.answer).double().mean()),
        "first_hop_on_pickup": float((hops[:, 0].argmax(-1) == data.first_support)
                                     .double().mean()),
        "last_hop_on_answer": float((hops[:, -1].argmax(-1) == data.test.support)
                                    .double().mean()),
    }


def run_hops(num_hops: int, seed: int, config: HopsConfig, data: HopsData,
             device: torch.device | str = "cpu") -> tuple[MemoryNetwork, dict[str, float]]:
    """Build a ``num_hops`` network with ``torch.manual_seed(seed)``, train it on
    ``data.train`` with batches from ``seed``, and evaluate it on ``data.test``."""
    require_positive_int(num_hops, "num_hops")
    torch.manual_seed(seed)
    network = MemoryNetwork(len(data.vocab), config.embed_dim, num_hops=num_hops,
                            max_sentences=config.sentences).to(device)
    train_hops(network, data.train, config, seed=seed)
    return network, evaluate_hops(network, data)

