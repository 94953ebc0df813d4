"""BPE tokenizer (shared vocabulary, exact round trip) and the word-level baseline."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from transformer_book.data.multi30k import load_multi30k
from transformer_book.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    MIN_VOCAB_SIZE,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    BPETokenizer,
)
from transformer_book.data.vocabulary import WordVocabulary, split_words, unknown_rate
from transformer_book.util.validation import BookError

SMALL_CORPUS = ["A man sleeps on a sofa.", "A dog runs.", "Ein Mann schläft.", "Ein Hund läuft."]


@pytest.fixture(scope="module")
def multi30k_pairs(multi30k_dir: Path) -> dict[str, list[tuple[str, str]]]:
    return {split: load_multi30k(split, data_dir=multi30k_dir) for split in ("train", "val")}


@pytest.fixture(scope="module")
def bpe(multi30k_pairs: dict[str, list[tuple[str, str]]]) -> BPETokenizer:
    texts = [sentence for pair in multi30k_pairs["train"] for sentence in pair]
    return BPETokenizer.train(texts, vocab_size=8000)


@pytest.fixture(scope="module")
def tiny() -> BPETokenizer:
    return BPETokenizer.train(SMALL_CORPUS * 3, vocab_size=300)


def test_special_token_ids(tiny: BPETokenizer) -> None:
    assert SPECIAL_TOKENS == ("<pad>", "<bos>", "<eos>", "<unk>")
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert [tiny.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert [tiny.id_to_token(i) for i in range(4)] == list(SPECIAL_TOKENS)


def test_decode_inverts_encode_on_val(bpe: BPETokenizer,
                                      multi30k_pairs: dict[str, list[tuple[str, str]]]) -> None:
    assert bpe.vocab_size == 8000 == len(bpe)
    for side in (0, 1):  # de, then en
        texts = [pair[side] for pair in multi30k_pairs["val"]]
        ids = bpe.encode_batch(texts)
        assert all(UNK_ID not in row for row in ids)
        assert bpe.decode_batch(ids) == texts
    text = multi30k_pairs["val"][0][0]
    assert bpe.decode(bpe.encode(text)) == text


def test_shared_vocabulary_compresses_both_languages(
    bpe: BPETokenizer, multi30k_pairs: dict[str, list[tuple[str, str]]]
) -> None:
    for side in (0, 1):
        texts = [pair[side] for pair in multi30k_pairs["val"]]
        n_tokens = sum(len(row) for row in bpe.encode_batch(texts))
        n_words = sum(len(t.split()) for t in texts)
        assert n_tokens < 1.6 * n_words, f"side {side}: {n_tokens} tokens for {n_words} words"


def test_round_trip_of_unseen_scripts_and_whitespace(tiny: BPETokenizer) -> None:
    for text in ["", " ", "  leading and double  spaces ", "日本語 ü\tTab\nnew line", "<bos><pad>"]:
        assert tiny.decode(tiny.encode(text)) == text
    assert not set(tiny.encode("<pad><bos><eos><unk>")) & {PAD_ID, BOS_ID, EOS_ID, UNK_ID}


def test_bos_eos_and_skip_special(tiny: BPETokenizer) -> None:
    ids = tiny.encode("A dog runs.", add_bos=True, add_eos=True)
    assert ids[0] == BOS_ID and ids[-1] == EOS_ID
    assert ids[1:-1] == tiny.encode("A dog runs.")
    assert tiny.decode(ids) == "A dog runs."
    assert tiny.decode(ids, skip_special=False) == "<bos>A dog runs.<eos>"
    batch = tiny.encode_batch(["A dog.", "Ein Hund läuft."], add_eos=True)
    assert [row[-1] for row in batch] == [EOS_ID, EOS_ID]


def test_decode_batch_of_padded_tensor(tiny: BPETokenizer) -> None:
    a, b = tiny.encode("A dog."), tiny.encode("A man sleeps on a sofa.")
    width = max(len(a), len(b))
    padded = torch.tensor([a + [PAD_ID] * (width - len(a)), b + [PAD_ID] * (width - len(b))])
    assert tiny.decode_batch(padded) == ["A dog.", "A man sleeps on a sofa."]
    assert tiny.decode(padded[0]) == "A dog."


def test_tokens_are_readable_pieces(tiny: BPETokenizer) -> None:
    pieces = tiny.tokens("Ein Mann schläft.")
    assert "".join(pieces) == "Ein Mann schläft."
    raw = tiny.tokens("Ein Mann", readable=False)
    assert [tiny.token_to_id(piece) for piece in raw] == tiny.encode("Ein Mann")


def test_save_load_round_trip(bpe: BPETokenizer, tmp_path: Path,
                              multi30k_pairs: dict[str, list[tuple[str, str]]]) -> None:
    path = tmp_path / "bpe.json"
    bpe.save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["bpe.json"]  # no temporary left over
    loaded = BPETokenizer.load(path)
    texts = [s for pair in multi30k_pairs["val"][:200] for s in pair]
    assert loaded.vocab_size == bpe.vocab_size
    assert loaded.encode_batch(texts) == bpe.encode_batch(texts)


def test_training_is_deterministic() -> None:
    a = BPETokenizer.train(SMALL_CORPUS * 3, vocab_size=300)
    b = BPETokenizer.train(SMALL_CORPUS * 3, vocab_size=300)
    assert a.encode_batch(SMALL_CORPUS) == b.encode_batch(SMALL_CORPUS)


def test_bad_training_input() -> None:
    with pytest.raises(BookError, match="texts: expected at least one non-empty sentence, "
                                         "received an empty corpus"):
        BPETokenizer.train([], vocab_size=1000)
    with pytest.raises(BookError, match="texts: expected at least one non-empty sentence"):
        BPETokenizer.train(["", ""], vocab_size=1000)
    with pytest.raises(BookError, match="texts: expected strings, received"):
        BPETokenizer.train([b"bytes"], vocab_size=1000)  # type: ignore[list-item]
    with pytest.raises(BookError, match=rf"vocab_size: expected an integer >= {MIN_VOCAB_SIZE}, "
                                         r"received 100"):
        BPETokenizer.train(SMALL_CORPUS, vocab_size=100)
    with pytest.raises(BookError, match="min_frequency: expected an integer >= 1, received 0"):
        BPETokenizer.train(SMALL_CORPUS, vocab_size=300, min_frequency=0)


def test_bad_ids_and_files(tiny: BPETokenizer, tmp_path: Path) -> None:
    with pytest.raises(BookError, match=r"ids: expected token ids in \[0, \d+\), received \[-1"):
        tiny.decode([5, -1])
    with pytest.raises(BookError, match=r"ids: expected token ids in \[0, \d+\), received \[999"):
        tiny.decode([99999])
    with pytest.raises(BookError, match="ids: expected a 1-D integer tensor"):
        tiny.decode(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(BookError, match="batch: expected a 2-D integer tensor"):
        tiny.decode_batch(torch.zeros(3))
    with pytest.raises(BookError, match="text: expected a string, received int"):
        tiny.encode(5)  # type: ignore[arg-type]
    with pytest.raises(BookError, match="path: expected an existing tokenizer JSON file"):
        BPETokenizer.load(tmp_path / "missing.json")
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    with pytest.raises(BookError, match="path: expected a tokenizers JSON file"):
        BPETokenizer.load(garbage)
    # A valid tokenizer whose specials are in the wrong place is refused.
    tiny.save(tmp_path / "ok.json")
    data = json.loads((tmp_path / "ok.json").read_text())
    data["added_tokens"] = []
    vocab = data["model"]["vocab"]
    vocab["<pad>"], vocab["<unk>"] = vocab["<unk>"], vocab["<pad>"]
    (tmp_path / "swapped.json").write_text(json.dumps(data))
    with pytest.raises(BookError, match=r"path: expected special tokens .* at ids \[0, 1, 2, 3\]"):
        BPETokenizer.load(tmp_path / "swapped.json")


# --------------------------------------------------------------------------- word baseline
def test_split_words() -> None:
    assert split_words("Ein Hund, der läuft.") == ["Ein", "Hund", ",", "der", "läuft", "."]


def test_word_vocabulary_build_and_encode() -> None:
    vocab = WordVocabulary.build(["a dog runs .", "a dog sleeps", "a cat"], min_frequency=2)
    assert vocab.itos == [*SPECIAL_TOKENS, "a", "dog"]
    assert vocab.encode("a dog flies", add_bos=True, add_eos=True) == [BOS_ID, 4, 5, UNK_ID, EOS_ID]
    assert vocab.decode([BOS_ID, 4, 5, UNK_ID, EOS_ID, PAD_ID]) == "a dog <unk>"
    assert vocab.id_to_token(5) == "dog" and vocab.token_to_id("zebra") == UNK_ID
    capped = WordVocabulary.build(["a a a b b c"], max_size=6)
    assert capped.itos[4:] == ["a", "b"] and len(capped) == 6


def test_unknown_rate_word_vs_bpe(bpe: BPETokenizer,
                                  multi30k_pairs: dict[str, list[tuple[str, str]]]) -> None:
    train_de = [pair[0] for pair in multi30k_pairs["train"]]
    val_de = [pair[0] for pair in multi30k_pairs["val"]]
    vocab = WordVocabulary.build(train_de, min_frequency=2)
    rate = unknown_rate(vocab, val_de)
    assert 0.005 < rate < 0.2  # German compounds the word list never saw
    assert unknown_rate(vocab, train_de[:100]) < rate
    assert all(UNK_ID not in row for row in bpe.encode_batch(val_de))  # BPE: none


def test_word_vocabulary_bad_input() -> None:
    with pytest.raises(BookError, match="texts: expected at least one sentence, received an"):
        WordVocabulary.build([])
    with pytest.raises(BookError, match="max_size: expected an integer >= 5, received 4"):
        WordVocabulary.build(["a"], max_size=4)
    with pytest.raises(BookError, match="min_frequency: expected an integer >= 1, received 0"):
        WordVocabulary.build(["a"], min_frequency=0)
    with pytest.raises(BookError, match=r"token_id: expected an integer >= 0 and <= 4, received 7"):
        WordVocabulary.build(["a"]).id_to_token(7)
    with pytest.raises(BookError, match="texts: expected at least one word, received no words"):
        unknown_rate(WordVocabulary.build(["a"]), ["", " "])
    with pytest.raises(BookError, match="itos: expected a list starting with"):
        WordVocabulary(["a", "b"])


def test_saved_tokenizer_is_readable_as_the_umask_allows(tmp_path: Path) -> None:
    tokenizer = BPETokenizer.train(["ein Mann", "a man"], vocab_size=MIN_VOCAB_SIZE)
    previous = os.umask(0o022)
    try:
        tokenizer.save(tmp_path / "tokenizer.json")
    finally:
        os.umask(previous)
    assert (tmp_path / "tokenizer.json").stat().st_mode & 0o777 == 0o644
    assert BPETokenizer.load(tmp_path / "tokenizer.json").vocab_size == tokenizer.vocab_size


@pytest.mark.parametrize("call", ["encode", "tokens", "encode_batch", "train"])
def test_a_lone_surrogate_is_named_with_its_position(tiny: BPETokenizer, call: str) -> None:
    text = "Ein Mann\ud800 schläft"
    where = "texts\\[1\\]" if call in ("encode_batch", "train") else "text"
    with pytest.raises(BookError, match=rf"{where}: expected text that UTF-8 can encode, "
                                        r"received '\\ud800' at position 8"):
        if call == "train":
            BPETokenizer.train(["ok", text], vocab_size=300)
        elif call == "encode_batch":
            tiny.encode_batch(["ok", text])
        else:
            getattr(tiny, call)(text)


def test_tokens_checks_its_arguments(tiny: BPETokenizer) -> None:
    with pytest.raises(BookError, match=r"text: expected a string, received int"):
        tiny.tokens(5)  # type: ignore[arg-type]
    with pytest.raises(BookError, match=r"readable: expected True or False, received 'no'"):
        tiny.tokens("Ein Mann", readable="no")  # type: ignore[arg-type]


def test_bpe_dropout_keeps_the_text_and_varies_the_segmentation(
        bpe: BPETokenizer, multi30k_pairs: dict[str, list[tuple[str, str]]]) -> None:
    texts = [de for de, _ in multi30k_pairs["val"][:200]]
    plain = bpe.encode_batch(texts)
    assert bpe.with_dropout(0).encode_batch(texts) == plain  # p = 0: the plain segmentation
    dropped = bpe.with_dropout(0.1)
    first, second = dropped.encode_batch(texts), dropped.encode_batch(texts)
    assert bpe.decode_batch(first) == texts == bpe.decode_batch(second)  # same text
    assert first != second and first != plain  # fresh draws on every call
    assert sum(map(len, first)) > sum(map(len, plain))  # skipped merges: more pieces
    assert all(0 <= i < bpe.vocab_size and i != UNK_ID for row in first for i in row)
    assert bpe.encode_batch(texts) == plain  # the original is left without dropout
    always = bpe.with_dropout(0.999)  # (almost) every merge skipped: bytes
    assert len(always.encode("Hund")) == 4


@pytest.mark.parametrize("p", [1.0, -0.1, "0.1", True, float("nan")])
def test_bpe_dropout_rejects_bad_probabilities(tiny: BPETokenizer, p) -> None:
    with pytest.raises(BookError, match=r"^p: expected a number in \[0, 1\)"):
        tiny.with_dropout(p)
