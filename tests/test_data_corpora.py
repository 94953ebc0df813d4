"""The dataset registry: load_corpus over Multi30k and a folder of parallel text, the errors a
user's own corpus gets, a dataset added by one registration line, and [data] dataset."""

from __future__ import annotations

import json

import pytest

from transformer_book.data import DATASETS, Dataset, load_corpus
from transformer_book.data.corpora import read_sentences
from transformer_book.data.multi30k import load_multi30k
from transformer_book.run.config import RunConfig, with_data_defaults
from transformer_book.util.validation import BookError

PAIRS = {"train": [("ein Hund", "a dog"), ("zwei Katzen", "two cats"), ("drei", "three")],
         "valid": [("vier Hunde", "four dogs")],
         "test": [("eine Katze", "a cat"), ("fünf", "five")]}


def write_corpus(folder, pairs=PAIRS, src="de", tgt="en"):
    """``folder/{split}.{src}`` and ``.{tgt}``, one sentence per line (UTF-8)."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in pairs.items():
        (folder / f"{split}.{src}").write_text("".join(s + "\n" for s, _ in rows), "utf-8")
        (folder / f"{split}.{tgt}").write_text("".join(t + "\n" for _, t in rows), "utf-8")
    return folder


def test_a_folder_of_parallel_text_reads_line_by_line(tmp_path) -> None:
    folder = write_corpus(tmp_path / "corpus")
    for split, rows in PAIRS.items():
        assert load_corpus("parallel-text", split, "de", "en", folder) == rows
    assert load_corpus("parallel-text", "test", "en", "de", str(folder)) == \
        [(t, s) for s, t in PAIRS["test"]], "either direction, the folder as a string"


def test_line_endings_byte_order_marks_and_inner_whitespace(tmp_path) -> None:
    path = tmp_path / "train.de"
    path.write_bytes("\ufeffein  Hund \r\nzwei\r\n\ndrei".encode())
    assert read_sentences(path) == ["ein  Hund ", "zwei", "", "drei"]


@pytest.mark.parametrize(("content", "received"), [
    (b"", "received an empty file"),
    (b"\n \n", "received 2 blank lines"),
])
def test_an_empty_file_is_named(tmp_path, content, received) -> None:
    folder = write_corpus(tmp_path / "corpus")
    (folder / "valid.en").write_bytes(content)
    with pytest.raises(BookError, match=f"valid.en: expected at least one sentence, {received}"):
        load_corpus("parallel-text", "valid", "de", "en", folder)


def test_unequal_line_counts_name_both_files_and_counts(tmp_path) -> None:
    folder = write_corpus(tmp_path / "corpus")
    (folder / "train.en").write_text("a dog\ntwo cats\n", "utf-8")
    with pytest.raises(BookError) as caught:
        load_corpus("parallel-text", "train", "de", "en", folder)
    message = str(caught.value)
    assert f"{folder / 'train.de'} and {folder / 'train.en'}: expected as many lines" in message
    assert message.endswith("received 3 lines in train.de and 2 in train.en"), message


def test_a_file_that_is_not_utf8_names_its_line(tmp_path) -> None:
    folder = write_corpus(tmp_path / "corpus")
    (folder / "train.de").write_bytes(b"ein Hund\nzwei Katzen\n" + "drei Bäume\n"
                                      .encode("latin-1"))
    with pytest.raises(BookError, match=r"train.de: expected UTF-8 text, received byte 0xe4 "
                                        r"on line 3, which is not UTF-8"):
        load_corpus("parallel-text", "train", "de", "en", folder)


def test_a_missing_file_or_folder_is_named(tmp_path) -> None:
    folder = write_corpus(tmp_path / "corpus")
    (folder / "test.en").unlink()
    with pytest.raises(BookError, match=r"test.en: expected a text file, one sentence per "
                                        r"line, received no such file"):
        load_corpus("parallel-text", "test", "de", "en", folder)
    with pytest.raises(BookError, match=r"data_dir: expected the folder holding train.de and "
                                        r"train.en, received '.*nowhere', which is not a folder"):
        load_corpus("parallel-text", "train", "de", "en", tmp_path / "nowhere")
    with pytest.raises(BookError, match=r"data_dir: expected the folder holding the "
                                        r"'parallel-text' files .*received no such key"):
        load_corpus("parallel-text", "train", "de", "en")


def test_bad_names_list_what_is_registered(tmp_path) -> None:
    folder = write_corpus(tmp_path / "corpus")
    with pytest.raises(BookError, match=r"^dataset: expected one of \['multi30k', "
                                        r"'parallel-text'\], received 'wmt14'$"):
        load_corpus("wmt14", "train")
    with pytest.raises(BookError, match=r"^split: expected one of \['train', 'valid', 'test'\], "
                                        r"received 'val'$"):
        load_corpus("parallel-text", "val", "de", "en", folder)
    with pytest.raises(BookError, match=r"^src: expected a language code"):
        load_corpus("parallel-text", "train", "../de", "en", folder)
    with pytest.raises(BookError, match=r"^tgt: expected a language different from src='de'"):
        load_corpus("parallel-text", "train", "de", "de", folder)
    with pytest.raises(BookError, match=r"^src: expected one of \['de', 'en', 'fr'\]"):
        load_corpus("multi30k", "train", "cs", "en")


def test_multi30k_through_the_registry(multi30k_dir) -> None:
    assert load_corpus("multi30k", "valid", "de", "en", multi30k_dir) == \
        load_multi30k("val", "de", "en", multi30k_dir)
    assert len(load_corpus("multi30k", "test", "en", "fr", multi30k_dir)) == 1000


def test_a_dataset_added_by_one_registration_line_trains_a_tokenizer(tmp_path,
                                                                     request) -> None:
    from transformer_book.train.corpus import prepare_data

    def counting(split, src, tgt, folder):
        """The numbers of the split in four base-4 digits, in words: 'drei null' -> 'three
        zero'."""
        words = {"de": ["null", "eins", "zwei", "drei"], "en": ["zero", "one", "two", "three"]}
        numbers = {"train": range(200), "valid": range(200, 220), "test": range(220, 240)}
        digits = [[n // 4**k % 4 for k in (3, 2, 1, 0)] for n in numbers[split]]
        return [(" ".join(words[src][d] for d in ds), " ".join(words[tgt][d] for d in ds))
                for ds in digits]

    DATASETS.register("counting", Dataset(load=counting, languages=("de", "en")))  # the line
    request.addfinalizer(lambda: DATASETS.unregister("counting"))

    assert load_corpus("counting", "valid", "en", "de")[0] == ("three zero two zero",
                                                              "drei null zwei null")
    run = RunConfig.from_dict({"model": {"preset": "tiny", "max_len": 32},
                               "data": {"dataset": "counting", "vocab_size": 300,
                                        "max_tokens": 64}})
    data = prepare_data(run, tmp_path / "run")
    assert data.stats["train_pairs"] == 200 and data.stats["val_pairs"] == 20
    assert data.tokenizer.decode(data.train_src[1]) == "null null null eins"
    info = json.loads((tmp_path / "run" / "tokenizer-info.json").read_text())
    assert info["dataset"] == "counting" and "train_sha256" in info, \
        "a dataset without fixed checksums is fingerprinted"


def test_changed_parallel_text_retrains_the_tokenizer(tmp_path) -> None:
    from transformer_book.train.corpus import prepare_data

    rows = [(f"wort{i} und {i % 7}", f"word{i} and {i % 7}") for i in range(60)]
    folder = write_corpus(tmp_path / "corpus", {"train": rows, "valid": rows[:5]})
    run = RunConfig.from_dict({"model": {"preset": "tiny", "max_len": 32},
                               "data": {"dataset": "parallel-text", "data_dir": str(folder),
                                        "vocab_size": 300, "max_tokens": 64}})
    out = tmp_path / "run"
    prepare_data(run, out)
    before = json.loads((out / "tokenizer-info.json").read_text())
    write_corpus(folder, {"train": rows[::-1]})  # same pairs, same count, another order
    prepare_data(run, out)
    after = json.loads((out / "tokenizer-info.json").read_text())
    assert before["train_pairs"] == after["train_pairs"] == 60
    assert before["train_sha256"] != after["train_sha256"], "the new text was noticed"


def test_the_data_section_names_its_dataset(tmp_path) -> None:
    assert RunConfig().data.dataset == "multi30k"
    run = RunConfig.from_dict({"data": {"dataset": "parallel-text", "src": "cs", "tgt": "en",
                                        "data_dir": str(tmp_path / "not-yet-there")}})
    assert run.data.src == "cs", "any language code: the files are the user's"
    with pytest.raises(BookError, match=r"^RunConfig \[data\] data_dir: expected the folder "
                                        r"holding the 'parallel-text' files"):
        RunConfig.from_dict({"data": {"dataset": "parallel-text"}})
    with pytest.raises(BookError, match=r"^RunConfig \[data\] dataset: expected one of "
                                        r"\['multi30k', 'parallel-text'\], received 'wmt'$"):
        RunConfig.from_dict({"data": {"dataset": "wmt"}})
    saved = {key: value for key, value in RunConfig().to_dict()["data"].items()
             if key != "dataset"}
    assert with_data_defaults(saved)["dataset"] == "multi30k", "a checkpoint from before"
