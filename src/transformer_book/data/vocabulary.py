"""A word-level vocabulary: the baseline that chapter 01 compares with BPE.

A fixed word vocabulary cannot spell a word it has not seen; each one becomes ``<unk>``.
Section 5.1 of the paper avoids that with byte-pair encoding (see
:mod:`transformer_book.data.tokenizer`); :func:`unknown_rate` measures what the word-level
alternative loses.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from transformer_book.data.tokenizer import BOS_ID, EOS_ID, SPECIAL_TOKENS, UNK_ID
from transformer_book.util.validation import require, require_int, require_positive_int

__all__ = ["WordVocabulary", "split_words", "unknown_rate"]

_WORD = re.compile(r"\w+|[^\w\s]")


def split_words(text: str) -> list[str]:
    """Split ``text`` into words and punctuation: ``"Ein Hund."`` -> ``["Ein", "Hund", "."]``.

    Case is kept; whitespace is dropped (so decoding cannot restore it exactly).
    """
    require(isinstance(text, str), "text", "a string", type(text).__name__)
    return _WORD.findall(text)


@dataclass
class WordVocabulary:
    """Words <-> ids with the specials ``<pad> <bos> <eos> <unk>`` at ids 0-3."""

    itos: list[str]
    stoi: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        require(tuple(self.itos[: len(SPECIAL_TOKENS)]) == SPECIAL_TOKENS, "itos",
                f"a list starting with {list(SPECIAL_TOKENS)}", self.itos[: len(SPECIAL_TOKENS)])
        self.stoi = {word: i for i, word in enumerate(self.itos)}

    @classmethod
    def build(
        cls, texts: Iterable[str], min_frequency: int = 1, max_size: int | None = None
    ) -> WordVocabulary:
        """Keep words seen at least ``min_frequency`` times, most frequent first.

        Args:
            texts: training sentences, split with :func:`split_words`.
            min_frequency: drop rarer words (they will map to ``<unk>``).
            max_size: cap on the vocabulary size, specials included (>= 5).
        """
        corpus = [texts] if isinstance(texts, str) else list(texts)
        require(len(corpus) > 0, "texts", "at least one sentence", "an empty corpus")
        require_positive_int(min_frequency, "min_frequency")
        if max_size is not None:
            require_int(max_size, "max_size", minimum=len(SPECIAL_TOKENS) + 1)
        counts = Counter(word for text in corpus for word in split_words(text))
        # Most frequent first; ties broken alphabetically so the result is deterministic.
        words = sorted((w for w, c in counts.items() if c >= min_frequency and
                        w not in SPECIAL_TOKENS), key=lambda w: (-counts[w], w))
        if max_size is not None:
            words = words[: max_size - len(SPECIAL_TOKENS)]
        return cls([*SPECIAL_TOKENS, *words])

    def __len__(self) -> int:
        return len(self.itos)

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included."""
        return len(self.itos)

    def token_to_id(self, word: str) -> int:
        """The id of ``word``, or ``UNK_ID`` if it is not in the vocabulary."""
        return self.stoi.get(word, UNK_ID)

    def id_to_token(self, token_id: int) -> str:
        """The word of ``token_id``."""
        require_int(token_id, "token_id", minimum=0, maximum=len(self.itos) - 1)
        return self.itos[token_id]

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Word ids of ``text``; unknown words become ``<unk>`` (id 3)."""
        ids = [self.token_to_id(word) for word in split_words(text)]
        return [BOS_ID] * add_bos + ids + [EOS_ID] * add_eos

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """Words of ``ids`` joined by single spaces (``<unk>`` kept: the word is lost)."""
        words = [self.id_to_token(i) for i in ids]
        if skip_special:
            words = [w for w, i in zip(words, ids, strict=True) if i >= UNK_ID]  # keep <unk>
        return " ".join(words)


def unknown_rate(vocabulary: WordVocabulary, texts: Iterable[str]) -> float:
    """Fraction of the words in ``texts`` that ``vocabulary`` maps to ``<unk>`` (0.0 to 1.0).

    Args:
        vocabulary: the word vocabulary to measure.
        texts: held-out sentences (e.g. Multi30k ``val``); must contain at least one word.
    """
    total = unknown = 0
    for text in texts:
        ids = vocabulary.encode(text)
        total += len(ids)
        unknown += sum(i == UNK_ID for i in ids)
    require(total > 0, "texts", "at least one word", "no words")
    return unknown / total
