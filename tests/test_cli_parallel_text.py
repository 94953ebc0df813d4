"""Training on your own parallel text from the command line, as a new user would: a folder of
train/valid/test files, a config naming it, ``transformer-book train``, then ``translate``."""

from __future__ import annotations

import itertools
import json

import pytest

from transformer_book.cli import main

NUMBERS = [("ein", "one"), ("zwei", "two"), ("drei", "three"), ("vier", "four"),
           ("fünf", "five"), ("sechs", "six")]
COLOURS = [("rote", "red"), ("blaue", "blue"), ("grüne", "green"), ("gelbe", "yellow"),
           ("weiße", "white")]
NOUNS = [("Hunde", "dogs"), ("Katzen", "cats"), ("Autos", "cars"), ("Häuser", "houses"),
         ("Bäume", "trees"), ("Vögel", "birds"), ("Boote", "boats"), ("Bälle", "balls"),
         ("Blumen", "flowers"), ("Kinder", "children")]

CONFIG = """
[model]
preset = "tiny"
max_len = 32

[data]
dataset = "parallel-text"
data_dir = "my-corpus"
src = "de"
tgt = "en"
vocab_size = 300
max_tokens = 128
max_len = 16

[train]
max_steps = 20
warmup_steps = 10
eval_every = 10
checkpoint_every = 10
keep_last = 2
precision = "fp32"

[decode]
beam_size = 2
max_len_a = 1.0
max_len_b = 4
"""


def synthetic_pairs() -> list[tuple[str, str]]:
    """300 short pairs, 'zwei rote Hunde' -> 'two red dogs', in a fixed shuffled order."""
    pairs = [(f"{n} {c} {o}", f"{n_en} {c_en} {o_en}") for (n, n_en), (c, c_en), (o, o_en)
             in itertools.product(NUMBERS, COLOURS, NOUNS)]
    return pairs[::7] + [p for i, p in enumerate(pairs) if i % 7]  # a deterministic mix


def write_folder(folder, pairs) -> None:
    folder.mkdir()
    splits = {"train": pairs[40:], "valid": pairs[:20], "test": pairs[20:40]}
    for split, rows in splits.items():
        (folder / f"{split}.de").write_text("".join(s + "\n" for s, _ in rows), "utf-8")
        (folder / f"{split}.en").write_text("".join(t + "\n" for _, t in rows), "utf-8")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A user's folder, config and run, trained by ``transformer-book train`` from the folder
    that holds them (``data_dir`` is relative to it)."""
    root = tmp_path_factory.mktemp("user")
    write_folder(root / "my-corpus", synthetic_pairs())
    (root / "my-corpus.toml").write_text(CONFIG, "utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        code = main(["train", "--config", "my-corpus.toml", "--out", "runs/my-corpus",
                     "--results", "results", "--quiet", "--bleu-sentences", "8"])
    assert code == 0
    return root


@pytest.mark.slow
def test_train_on_a_folder_of_parallel_text_then_translate(trained, capsys) -> None:
    run = trained / "runs" / "my-corpus"
    assert sorted(p.name for p in run.glob("step_*")) == ["step_00000010", "step_00000020"]
    info = json.loads((run / "tokenizer-info.json").read_text())
    assert info["dataset"] == "parallel-text" and info["train_pairs"] == 260
    record = json.loads(next((trained / "results").glob("train-my-corpus-*.json")).read_text())
    assert record["steps"] == 20
    capsys.readouterr()
    code = main(["translate", "zwei rote Hunde", "drei blaue Katzen", "--checkpoint", str(run),
                 "--beam", "1"])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2, "one translation per sentence"


@pytest.mark.slow
def test_a_misaligned_folder_is_one_line_naming_the_files(tmp_path, monkeypatch, capsys) -> None:
    write_folder(tmp_path / "my-corpus", synthetic_pairs())
    lines = (tmp_path / "my-corpus" / "train.en").read_text("utf-8").splitlines()
    (tmp_path / "my-corpus" / "train.en").write_text("\n".join(lines[:-1]) + "\n", "utf-8")
    (tmp_path / "my-corpus.toml").write_text(CONFIG, "utf-8")
    monkeypatch.chdir(tmp_path)
    code = main(["train", "--config", "my-corpus.toml", "--out", "runs/x", "--results",
                 "results", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "my-corpus/train.de and my-corpus/train.en: expected as many lines" in err
    assert "received 260 lines in train.de and 259 in train.en" in err
