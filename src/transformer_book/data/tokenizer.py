"""A joint byte-pair-encoding tokenizer for source and target, built on HF ``tokenizers``.

Section 5.1 "Training Data and Batching": "Sentences were encoded using byte-pair encoding
[3], which has a shared source-target vocabulary of about 37000 tokens." The course does
the same on Multi30k with a smaller vocabulary: one :class:`BPETokenizer` is trained on
German and English sentences together, so both sides of the model share one embedding
table (Section 3.4 ties the embeddings and the pre-softmax projection).

The BPE model works on bytes (GPT-2's byte-level pre-tokenizer, no prefix space, no
normalization), so every string -- any script, any whitespace, even a literal ``"<bos>"`` -- is
encoded without ``<unk>`` and ``decode(encode(text)) == text`` exactly.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from transformer_book.util.files import atomic_write_text
from transformer_book.util.validation import (
    bad_input,
    is_real,
    require,
    require_bool,
    require_int,
    require_positive_int,
)

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "UNK_ID",
    "BPETokenizer",
]

#: The special tokens, in id order: padding, begin and end of sentence, unknown.
SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3

_BYTE_ALPHABET = pre_tokenizers.ByteLevel.alphabet()
#: The smallest vocabulary BPE can have: the special tokens and the 256 byte symbols.
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + len(_BYTE_ALPHABET)

Ids = Sequence[int] | torch.Tensor


def _configure(tokenizer: Tokenizer) -> Tokenizer:
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _check_text(text: str, argument: str) -> None:
    """A string that UTF-8 can encode (a lone surrogate such as ``"\\ud800"``, e.g. from a
    badly decoded file, cannot: byte-level BPE has no bytes for it)."""
    require(isinstance(text, str), argument, "a string", type(text).__name__)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise bad_input(argument, "text that UTF-8 can encode",
                   f"{text[error.start:error.end]!r} at position {error.start} "
                   f"({error.reason})") from None


def _check_texts(texts: Sequence[str], argument: str) -> None:
    for i, text in enumerate(texts):
        _check_text(text, f"{argument}[{i}]")


def _check_specials(tokenizer: Tokenizer, argument: str) -> None:
    ids = [tokenizer.token_to_id(token) for token in SPECIAL_TOKENS]
    expected = f"special tokens {list(SPECIAL_TOKENS)} at ids [0, 1, 2, 3]"
    require(ids == [PAD_ID, BOS_ID, EOS_ID, UNK_ID], argument, expected, f"ids {ids}")


class BPETokenizer:
    """Byte-level BPE with the course's special tokens ``<pad>=0 <bos>=1 <eos>=2 <unk>=3``.

    Build one with :meth:`train` or :meth:`load`; wrapping an existing
    ``tokenizers.Tokenizer`` is possible if it has the same special-token ids.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        require(isinstance(tokenizer, Tokenizer), "tokenizer", "a tokenizers.Tokenizer",
                type(tokenizer).__name__)
        _check_specials(tokenizer, "tokenizer")
        # Text that happens to read "<bos>" is ordinary text, not the special token:
        # special ids are only ever added by ``add_bos``/``add_eos`` or padding.
        tokenizer.encode_special_tokens = True
        self._tokenizer = tokenizer

    # ------------------------------------------------------------------ building
    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int, min_frequency: int = 2
    ) -> BPETokenizer:
        """Learn BPE merges from ``texts`` (source and target sentences together).

        Section 5.1: "byte-pair encoding, which has a shared source-target vocabulary".
        Starting from the 256 bytes, the most frequent adjacent pair is merged into a new
        symbol until the vocabulary holds ``vocab_size`` entries (or no pair occurs
        ``min_frequency`` times).

        Args:
            texts: training sentences; at least one must be non-empty.
            vocab_size: target size including the 4 special tokens and 256 bytes (>= 260).
            min_frequency: a pair must occur this often to be merged.
        """
        corpus = [texts] if isinstance(texts, str) else list(texts)
        require(all(isinstance(t, str) for t in corpus), "texts", "strings",
                sorted({type(t).__name__ for t in corpus}))
        _check_texts(corpus, "texts")
        require(any(corpus), "texts", "at least one non-empty sentence",
                f"{len(corpus)} sentences, all empty" if corpus else "an empty corpus")
        require_int(vocab_size, "vocab_size", minimum=MIN_VOCAB_SIZE)
        require_positive_int(min_frequency, "min_frequency")
        tokenizer = _configure(Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS[UNK_ID])))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS),
            initial_alphabet=_BYTE_ALPHABET,
            show_progress=False,
        )
        tokenizer.train_from_iterator(corpus, trainer, length=len(corpus))
        return cls(tokenizer)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the tokenizer as ``tokenizers`` JSON, atomically (0644 under umask 022)."""
        atomic_write_text(path, self._tokenizer.to_str())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> BPETokenizer:
        """Read a tokenizer written by :meth:`save`."""
        source = Path(path)
        require(source.is_file(), "path", "an existing tokenizer JSON file", str(source))
        try:
            tokenizer = Tokenizer.from_str(source.read_text(encoding="utf-8"))
        except Exception as error:  # tokenizers raises its own Exception type
            raise bad_input("path", "a tokenizers JSON file", f"{source} ({error})") from error
        _check_specials(tokenizer, "path")
        return cls(tokenizer)

    def with_dropout(self, p: float) -> BPETokenizer:
        """A copy that skips each BPE merge with probability ``p`` while it encodes
        (BPE-dropout, Provilkov et al., 2020): the same vocabulary, so the same ids and the
        same decoded text, but a different segmentation on each call. ``p = 0`` is the
        plain segmentation. The draws come from ``tokenizers``' own generator, which cannot
        be seeded."""
        require(is_real(p) and 0.0 <= p < 1.0, "p", "a number in [0, 1)",
                repr(p))
        copy = Tokenizer.from_str(self._tokenizer.to_str())
        copy.model.dropout = float(p) if p > 0 else None
        return BPETokenizer(copy)

    # ------------------------------------------------------------------ lookup
    @property
    def vocab_size(self) -> int:
        """Number of token ids, specials included (the embedding table's row count)."""
        return self._tokenizer.get_vocab_size()

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size})"

    def token_to_id(self, token: str) -> int | None:
        """The id of vocabulary entry ``token`` (byte-level spelling, e.g. ``"ĠMann"``)."""
        return self._tokenizer.token_to_id(token)

    def id_to_token(self, token_id: int) -> str:
        """The vocabulary entry of ``token_id``."""
        self._check_ids([token_id], "token_id")
        token = self._tokenizer.id_to_token(token_id)
        assert token is not None, f"id {token_id} < vocab_size has no token"
        return token

    # ------------------------------------------------------------------ encoding
    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token ids of ``text``, optionally wrapped in ``<bos>`` ... ``<eos>``."""
        _check_text(text, "text")
        ids = self._tokenizer.encode(text, add_special_tokens=False).ids
        return [BOS_ID] * add_bos + ids + [EOS_ID] * add_eos

    def encode_batch(
        self, texts: Sequence[str], add_bos: bool = False, add_eos: bool = False
    ) -> list[list[int]]:
        """:meth:`encode` for many sentences at once (in parallel inside ``tokenizers``)."""
        require(not isinstance(texts, str) and all(isinstance(t, str) for t in texts),
                "texts", "a sequence of strings", type(texts).__name__)
        _check_texts(texts, "texts")
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [[BOS_ID] * add_bos + e.ids + [EOS_ID] * add_eos for e in encodings]

    def tokens(self, text: str, readable: bool = True) -> list[str]:
        """The BPE pieces of ``text``, to show how words are split.

        With ``readable=True`` each piece is shown as the text it covers (a leading space
        marks a word start, e.g. ``["Ein", " Mann", " schl", "äft"]``); with ``False`` the
        raw vocabulary spelling of byte-level BPE (``"ĠMann"``, bytes as symbols).
        """
        _check_text(text, "text")
        require_bool(readable, "readable")
        pieces = self._tokenizer.encode(text, add_special_tokens=False).tokens
        if not readable:
            return pieces
        decoder = self._tokenizer.decoder
        return [decoder.decode([piece]) for piece in pieces]

    # ------------------------------------------------------------------ decoding
    def _check_ids(self, ids: Sequence[int], argument: str) -> None:
        bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, int)
               or not 0 <= i < self.vocab_size]
        require(not bad, argument, f"token ids in [0, {self.vocab_size})", bad[:5])

    @staticmethod
    def _as_list(ids: Sequence[Any] | torch.Tensor, argument: str, ndim: int) -> list:
        if isinstance(ids, torch.Tensor):
            require(ids.ndim == ndim and not ids.is_floating_point(), argument,
                    f"a {ndim}-D integer tensor", f"{ids.dtype} of shape {tuple(ids.shape)}")
            return ids.tolist()
        return list(ids)

    def decode(self, ids: Ids, skip_special: bool = True) -> str:
        """The text of token ids ``ids`` (list or 1-D tensor); specials dropped by default."""
        values = self._as_list(ids, "ids", 1)
        self._check_ids(values, "ids")
        return self._tokenizer.decode(values, skip_special_tokens=skip_special)

    def decode_batch(self, batch: Sequence[Sequence[int]] | torch.Tensor,
                     skip_special: bool = True) -> list[str]:
        """:meth:`decode` for each row of ``batch`` (lists or a ``(B, L)`` tensor).

        With ``skip_special=True`` the ``<pad>`` fill of a padded batch disappears too.
        """
        rows = [list(row) for row in self._as_list(batch, "batch", 2)]
        for row in rows:
            self._check_ids(row, "batch")
        return self._tokenizer.decode_batch(rows, skip_special_tokens=skip_special)
