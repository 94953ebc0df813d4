"""transformer_book.interop: the Hugging Face export computes what the course model computes
(float64 logits on padded batches; greedy generate = the course's greedy translation), its
tokenizer and generation config, the CTranslate2 conversion, the refusals, and the
``transformer-book export`` command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig
from transformers.models.marian import modeling_marian

from transformer_book.cli import main
from transformer_book.data.batching import pad_sequences
from transformer_book.data.multi30k import load_multi30k
from transformer_book.data.tokenizer import BPETokenizer
from transformer_book.inference.greedy import greedy_decode
from transformer_book.inference.trained import load_trained
from transformer_book.interop import ctranslate, hf_export
from transformer_book.interop.hf_export import (
    MARKER,
    export_checkpoint,
    logit_difference,
    to_marian,
)
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.run.checkpoint import checkpoint_name, save_checkpoint
from transformer_book.run.config import RunConfig
from transformer_book.util.folders import tidy
from transformer_book.util.validation import BookError

F64 = torch.float64
LIMIT = 30  # the run's decoding budget: max_len_a = 0, max_len_b = 30 tokens
UNSEEN = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch."]


def _config(vocab_size: int, **overrides) -> TransformerConfig:
    return TransformerConfig.preset("tiny", vocab_size, **{
        "d_model": 32, "d_ff": 64, "dropout": 0.0, "max_len": 64, **overrides})


def _run_config() -> RunConfig:
    return RunConfig.from_dict({"model": {"preset": "tiny"}, "decode": {
        "beam_size": 1, "max_len_a": 0.0, "max_len_b": LIMIT}})


def _save(folder, net, step, tokenizer_file):
    return save_checkpoint(folder / checkpoint_name(step), net, step=step,
                           config={"model": net.config.to_dict(), "run": _run_config().to_dict()},
                           tokenizer_path=tokenizer_file)


@pytest.fixture(scope="module")
def corpus(multi30k_dir, tmp_path_factory):
    """A BPE of 600 tokens learnt on 300 val pairs, and the 8 shortest of those pairs."""
    pairs = load_multi30k("val", "de", "en", str(multi30k_dir))[:300]
    tokenizer = BPETokenizer.train([t for pair in pairs for t in pair], vocab_size=600)
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    tokenizer.save(path)
    return tokenizer, path, sorted(pairs, key=lambda p: len(p[0]))[:8]


@pytest.fixture(scope="module")
def fitted(corpus, tmp_path_factory):
    """A run folder with checkpoints at steps 20 and 40 of fitting a small model to the 8
    pairs (Adam, teacher forcing): it then translates them and stops with <eos>."""
    tokenizer, path, pairs = corpus
    src = pad_sequences(tokenizer.encode_batch([s for s, _ in pairs]), 0)
    tgt = pad_sequences(tokenizer.encode_batch([t for _, t in pairs], add_bos=True,
                                               add_eos=True), 0)
    torch.manual_seed(0)
    net = Transformer(_config(tokenizer.vocab_size))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    run_dir = tmp_path_factory.mktemp("fitted") / "run"
    for step in range(1, 41):
        logits = net(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            _save(run_dir, net, step, path)
    return run_dir


@pytest.fixture(scope="module")
def exported(fitted, tmp_path_factory):
    folder = tmp_path_factory.mktemp("export") / "hf"
    result = export_checkpoint(fitted, folder)
    return folder, result


def _random_model(vocab_size: int, seed: int) -> Transformer:
    """Every weight random, LayerNorm γ and β included (nothing symmetric to hide behind)."""
    torch.manual_seed(seed)
    net = Transformer(_config(vocab_size)).to(F64).eval()
    with torch.no_grad():
        for name, p in net.named_parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5) if name.endswith("norm1.weight") else p.normal_(0, 0.3)
    return net


def _one_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("transformer-book export")
    return captured.err


# ----------------------------------------------------------------------------- equality


@pytest.mark.parametrize("seed", [0, 1])
def test_marian_logits_equal_the_course_models_in_float64(corpus, seed):
    net = _random_model(corpus[0].vocab_size, seed)
    marian = to_marian(net)
    for batch, length in [(1, 1), (3, 9), (4, 17)]:
        assert logit_difference(net, marian, seed=seed, batch=batch, length=length) < 1e-11


def test_without_the_permutation_the_logits_differ(corpus, monkeypatch):
    """The check can fail: Marian's sin|cos halves against the paper's interleaving."""
    net = _random_model(corpus[0].vocab_size, 0)
    monkeypatch.setattr(hf_export, "residual_permutation", lambda d: torch.arange(d))
    monkeypatch.setattr(hf_export, "_check_positions", lambda *args: None)
    assert logit_difference(net, to_marian(net)) > 1e-3


def test_the_saved_folder_gives_the_course_logits_on_padded_sentences(corpus, fitted, exported):
    tokenizer, _, pairs = corpus
    folder, result = exported
    assert result.max_abs_difference < 1e-11 and result.steps == [40]
    assert result.num_parameters == sum(p.numel() for p in load_trained(fitted).model.parameters())
    hf_tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, dtype=F64).eval()
    assert type(model).__name__ == "MarianMTModel"
    sources = [s for s, _ in pairs[:3]] + UNSEEN
    targets = [t for _, t in pairs[:3]] + ["A dog.", "Two", "A woman reads a book ."]
    src = hf_tokenizer(sources, padding=True, return_tensors="pt")
    tgt = hf_tokenizer(targets, padding=True, return_tensors="pt")["input_ids"]
    tgt = torch.cat([torch.ones_like(tgt[:, :1]), tgt], dim=1)  # <bos> first
    assert src["input_ids"].tolist() == pad_sequences(tokenizer.encode_batch(sources), 0).tolist()
    course = load_trained(fitted).model.to(F64)
    with torch.no_grad():
        expected = course(src["input_ids"], tgt)
        got = model(**src, decoder_input_ids=tgt).logits
    assert (expected - got).abs().max() < 1e-11 * expected.abs().max()


def _course_greedy(run_dir, sentences, capsys) -> list[str]:
    """``transformer-book translate --beam 1``, as a user runs it."""
    capsys.readouterr()
    assert main(["translate", *sentences, "--checkpoint", str(run_dir), "--beam", "1"]) == 0
    return capsys.readouterr().out.splitlines()


def test_greedy_generate_returns_the_course_translations(corpus, fitted, exported, capsys):
    tokenizer, _, pairs = corpus
    sentences = [s for s, _ in pairs] + UNSEEN
    course = _course_greedy(fitted, sentences, capsys)
    ids = greedy_decode(load_trained(fitted).model,
                        pad_sequences(tokenizer.encode_batch(sentences), 0),
                        max_len_a=0.0, max_len_b=LIMIT)
    stopped = [len(row) < LIMIT for row in ids]  # ended with <eos> within the budget
    assert all(stopped[: len(pairs)]), "the fitted model should translate its pairs"
    assert course[: len(pairs)] == [t for _, t in pairs]
    folder, _ = exported
    hf_tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    batch = hf_tokenizer(sentences, padding=True, return_tensors="pt")
    defaults = hf_tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True)
    ended = [i for i, s in enumerate(stopped) if s]
    assert [defaults[i] for i in ended] == [course[i] for i in ended]
    # With the course's length budget too, every sentence agrees, cut ones included.
    budget = model.generate(**batch, max_new_tokens=LIMIT, num_beams=1, do_sample=False)
    assert hf_tokenizer.batch_decode(budget, skip_special_tokens=True) == course


def test_tokenizer_keeps_ids_and_text_exactly(corpus, exported):
    tokenizer, _, _ = corpus
    hf_tokenizer = AutoTokenizer.from_pretrained(exported[0])
    for text in ["Ein  Mann ,fährt  Fahrrad . ", "mit <bos> und <pad> darin", "Café — 東京 😀"]:
        ids = tokenizer.encode(text)
        assert hf_tokenizer(text)["input_ids"] == ids
        assert hf_tokenizer.decode(ids) == text == tokenizer.decode(ids)
    assert [hf_tokenizer.pad_token_id, hf_tokenizer.bos_token_id, hf_tokenizer.eos_token_id,
            hf_tokenizer.unk_token_id] == [0, 1, 2, 3]
    assert hf_tokenizer.clean_up_tokenization_spaces is False
    saved = json.loads((exported[0] / "tokenizer_config.json").read_text())
    assert saved["tokenizer_class"] == "PreTrainedTokenizerFast" and saved["split_special_tokens"]


def test_generation_config_is_greedy_from_bos(exported):
    folder, _ = exported
    config = GenerationConfig.from_pretrained(folder)
    assert (config.decoder_start_token_id, config.eos_token_id, config.pad_token_id) == (1, 2, 0)
    assert config.num_beams == 1 and config.do_sample is False and config.max_length == 64
    assert config.forced_eos_token_id is None and not config.bad_words_ids
    marker = json.loads((folder / MARKER).read_text())
    assert marker["steps"] == [40] and marker["max_abs_logit_difference_float64"] < 1e-11


def test_ctranslate2_greedy_search_matches_the_course(corpus, fitted, exported, tmp_path):
    tokenizer, _, pairs = corpus
    for over in (exported[0], exported[0] / "ct2", exported[0].parent):
        with pytest.raises(BookError, match="out: expected a folder apart from the exported"):
            ctranslate.convert(exported[0], over, force=True)
    assert (exported[0] / MARKER).is_file()
    converted = ctranslate.convert(exported[0], tmp_path / "ct2")
    translator = ctranslate.load_translator(converted)
    hf_tokenizer = AutoTokenizer.from_pretrained(exported[0])
    sources = tokenizer.encode_batch([s for s, _ in pairs])
    course = greedy_decode(load_trained(fitted).model, pad_sequences(sources, 0),
                           max_len_a=0.0, max_len_b=LIMIT)
    assert ctranslate.translate_ids(translator, hf_tokenizer, sources, max_len=64) == course
    with ctranslate.TranslatorProcess(converted, exported[0], "float32") as apart:
        assert apart.translate_ids(sources, max_len=64) == course  # in its own process
        assert apart.seconds["wall"] > 0 and apart.seconds["cpu"] > 0
        with pytest.raises(BookError, match="beam_size: expected"):
            apart.translate_ids(sources, beam_size=0)  # its error there, raised here
        assert apart.translate_ids(sources[:2], max_len=64) == course[:2]
    assert not apart._process.is_alive()
    with pytest.raises(BookError, match="compute_type: expected one of"):
        ctranslate.TranslatorProcess(converted, exported[0], "int4")
    with pytest.raises(OSError):  # the tokenizer is read there: its error, raised here
        ctranslate.TranslatorProcess(converted, tmp_path / "missing", "float32")


# ----------------------------------------------------------------------------- the command


def test_export_averages_the_checkpoints_it_is_asked_to(fitted, tmp_path, capsys):
    out = tmp_path / "avg"
    assert main(["export", "--checkpoint", str(fitted), "--out", str(out), "--average", "2"]) == 0
    assert "steps [20, 40]" in capsys.readouterr().out
    averaged = load_trained(fitted, average=2).model
    model = AutoModelForSeq2SeqLM.from_pretrained(out)
    assert logit_difference(averaged, model) < 1e-11
    assert logit_difference(load_trained(fitted).model, model) > 1e-3  # not step 40 alone


@pytest.mark.parametrize("option, value, named", [
    ("norm_first", True, "norm_first=True"),
    ("positional", "learned", "positional='learned'"),
    ("final_norm", True, "final_norm=True"),
    ("generator_bias", True, "generator_bias=True"),
    ("tie_embeddings", False, "tie_embeddings=False"),
    ("layer_norm_eps", 1e-6, "layer_norm_eps=1e-06"),
])
def test_a_model_marian_cannot_compute_is_refused_naming_its_option(
        corpus, tmp_path, capsys, option, value, named):
    overrides = {option: value, **({"final_norm": True} if option == "norm_first" else {})}
    net = Transformer(_config(corpus[0].vocab_size, **overrides))
    _save(tmp_path / "run", net, 1, corpus[1])
    out = tmp_path / "out"
    assert main(["export", "--checkpoint", str(tmp_path / "run"), "--out", str(out)]) == 2
    assert f"a model trained with {named}" in _one_line(capsys)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_positions_marian_computes_otherwise_are_refused(corpus, monkeypatch):
    original = modeling_marian.MarianSinusoidalPositionalEmbedding.create_weight

    def shifted(self):
        table = original(self)
        table[7, 3] += 1e-3
        return table

    monkeypatch.setattr(modeling_marian.MarianSinusoidalPositionalEmbedding, "create_weight",
                        shifted)
    with pytest.raises(BookError, match="max_len=64, whose position 7 differs"):
        to_marian(_random_model(corpus[0].vocab_size, 0))


@pytest.mark.parametrize("arguments, message", [
    (["--average", "0"], "--average: expected an integer >= 1, received 0"),
    (["--average", "3"], "average: expected at most the 2 checkpoints"),
    (["--average", "two"], "argument --average: invalid int value: 'two'"),
])
def test_bad_arguments_are_one_line(fitted, tmp_path, capsys, arguments, message):
    out = tmp_path / "out"
    assert main(["export", "--checkpoint", str(fitted), "--out", str(out), *arguments]) == 2
    assert message in _one_line(capsys)
    assert not out.exists()


def test_missing_checkpoint_or_out_is_one_line(tmp_path, capsys):
    assert main(["export", "--checkpoint", str(tmp_path / "none"), "--out", str(tmp_path)]) == 2
    assert "checkpoint: expected an existing checkpoint or run folder" in _one_line(capsys)
    assert main(["export", "--checkpoint", str(tmp_path)]) == 2
    assert "the following arguments are required: --out" in _one_line(capsys)


def test_a_folder_of_other_files_is_refused_and_left_alone(fitted, tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    (tmp_path / "file").write_text("a file")
    for out in ("mine", "file"):
        assert main(["export", "--checkpoint", str(fitted), "--out", str(tmp_path / out)]) == 2
        assert "--out: expected" in _one_line(capsys)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]


def test_an_earlier_export_is_replaced_and_no_temporary_is_left(fitted, tmp_path, capsys):
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(fitted / checkpoint_name(20)),
                 "--out", str(out)]) == 0
    assert json.loads((out / MARKER).read_text())["steps"] == [20]
    assert main(["export", "--checkpoint", str(fitted), "--out", str(out)]) == 0
    assert json.loads((out / MARKER).read_text())["steps"] == [40]
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]


def test_a_failed_export_leaves_nothing_behind(fitted, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(hf_export, "logit_difference", broken)
    with pytest.raises(RuntimeError, match="interrupted"):
        export_checkpoint(fitted, tmp_path / "hf")
    assert list(tmp_path.iterdir()) == []


def test_an_earlier_export_holding_a_file_it_did_not_write_is_refused(fitted, tmp_path,
                                                                      capsys):
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(fitted / checkpoint_name(20)),
                 "--out", str(out)]) == 0
    (out / "notes.txt").write_text("keep me")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["export", "--checkpoint", str(fitted), "--out", str(out)]) == 2
    assert "holding files it did not write (or that were changed since): notes.txt" in \
        _one_line(capsys)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_an_export_keeps_an_edited_file_a_file_saved_meanwhile_and_a_link(
        fitted, tmp_path, capsys, monkeypatch):
    """An edited README.md is no longer the export's to replace; a file saved into the old
    export while the new one is written is found by the check just before the swap; an --out
    that is a symbolic link (dangling here) is refused in one line, not a traceback."""
    from transformer_book.interop import hf_export

    out = tmp_path / "hf"
    argv = ["export", "--checkpoint", str(fitted / checkpoint_name(20)), "--out", str(out)]
    assert main(argv) == 0
    readme = (out / "README.md").read_text()
    (out / "README.md").write_text(readme + "\nMy notes on this model.\n")
    assert main(argv) == 2
    assert "(or that were changed since): README.md" in _one_line(capsys)
    assert (out / "README.md").read_text().endswith("My notes on this model.\n")
    (out / "README.md").write_text(readme)
    assert main(argv) == 0, "as it wrote it: replaced"

    real_save = hf_export._generation_config

    def save_while_exporting(config):  # the user saves a file while the export runs
        (out / "while.txt").write_text("saved during the export")
        return real_save(config)

    monkeypatch.setattr(hf_export, "_generation_config", save_while_exporting)
    assert main(argv) == 2
    assert "while.txt" in _one_line(capsys)
    assert (out / "while.txt").read_text() == "saved during the export"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary left"
    monkeypatch.undo()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    assert main([*argv[:-1], str(link)]) == 2
    assert "--out: expected a folder path that is no symbolic link" in _one_line(capsys)


def test_export_into_the_current_folder_is_one_line(fitted, tmp_path, capsys, monkeypatch):
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(fitted / checkpoint_name(20)),
                 "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (out / "sub").mkdir()
    for here, argument in ((out, "."), (out / "sub", "..")):
        monkeypatch.chdir(here)
        assert main(["export", "--checkpoint", str(fitted), "--out", argument]) == 2
        assert "which holds the current folder" in _one_line(capsys)
    (out / "sub").rmdir()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


WRAPPER = Path(__file__).resolve().parent / "export_fault_wrapper.py"


@pytest.mark.slow
@pytest.mark.parametrize("mode, left", [("write", 20), ("swap", 20), ("cleanup", 40),
                                        ("between", None)])
def test_a_kill_during_an_export_leaves_the_old_or_the_new_one(fitted, tmp_path, capsys,
                                                               mode, left):
    """SIGKILL (its own process, tests/export_fault_wrapper.py) at each moment of replacing
    the export of step 20 by step 40's: ``--out`` holds one of them, complete (on a system
    without the atomic exchange, a kill between its two renames leaves the old one aside,
    and the next export puts it back); the next export deletes the leftovers."""
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(fitted / checkpoint_name(20)),
                 "--out", str(out)]) == 0
    child = subprocess.run([sys.executable, str(WRAPPER), mode, str(fitted), str(out)],
                           capture_output=True, text=True, timeout=600,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    left_behind = sorted(p.name.split("-")[0] for p in tmp_path.iterdir() if p.name != "hf")
    if left is None:  # the old export aside, the new one complete in its hidden folder
        assert not out.exists() and left_behind == [".hf.old", ".hf.tmp"], left_behind
        assert sorted(p.name[:8] for p in tidy(tmp_path, MARKER, "hf")) == [".hf.old-",
                                                                             ".hf.tmp-"]
        assert "hf: recovered from .hf.tmp-" in capsys.readouterr().err
        left = 40
    else:
        assert left_behind == [".hf.tmp"], left_behind
    steps = json.loads((out / MARKER).read_text())["steps"]
    assert steps == [left]
    assert sorted(json.loads((out / MARKER).read_text())["files"] + [MARKER]) == sorted(
        p.name for p in out.iterdir())
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(fitted), "--out", str(out)]) == 0
    if mode != "between":
        assert f"{tmp_path}: removed .hf.tmp-" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]
    assert json.loads((out / MARKER).read_text())["steps"] == [40]
