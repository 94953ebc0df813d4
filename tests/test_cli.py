"""The command line end to end: train on a tiny config, translate, evaluate, and its errors:
a BookError is one line and exit status 2, anything else a traceback."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import time

import pytest
import torch
from plan_utils import write_plan

from transformer_book.cli import main
from transformer_book.data.multi30k import load_multi30k
from transformer_book.data.tokenizer import BPETokenizer
from transformer_book.inference.trained import load_trained
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.run import plans
from transformer_book.run.checkpoint import checkpoint_name, save_checkpoint
from transformer_book.run.config import RunConfig
from transformer_book.train.step import NonFiniteLossError
from transformer_book.util.validation import BookError

TINY = """
[model]
preset = "tiny"
max_len = 128

[data]
vocab_size = 400
max_tokens = 128
train_subset = 64
max_len = 32
data_dir = "{data_dir}"

[train]
max_steps = 20
warmup_steps = 10
eval_every = 1000
checkpoint_every = 10
keep_last = 3
precision = "fp32"

[decode]
beam_size = 2
max_len_a = 0.5   # an untrained model rarely stops: keep decoding short
max_len_b = 4
"""


@pytest.fixture(scope="module")
def run(multi30k_dir, tmp_path_factory):
    """``transformer-book train`` once: a tiny run with checkpoints at steps 10 and 20."""
    root = tmp_path_factory.mktemp("cli")
    config = root / "tiny-cli.toml"
    config.write_text(TINY.format(data_dir=multi30k_dir))
    code = main(["train", "--config", str(config), "--out", str(root / "run"),
                 "--results", str(root / "results"), "--quiet", "--bleu-sentences", "8",
                 "--val-sentences", "32"])
    assert code == 0
    return root


def _one_line(capsys) -> str:
    """stderr of a refusal: exactly one line, the command's name first; nothing on stdout."""
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.endswith("\n"), captured.err
    assert captured.err.startswith("transformer-book"), captured.err
    return captured.err


def _record(folder, kind):
    found = sorted(folder.glob(f"{kind}-*.json"))
    assert found, f"no {kind} record in {folder}"
    return json.loads(found[-1].read_text())


@pytest.mark.slow
def test_train_writes_checkpoints_and_a_record(run, capsys):
    """A checkpoint every checkpoint_every steps and at every evaluation (each epoch's end
    here), so that best-val can choose any evaluated step; --average N averages the regular
    ones."""
    names = sorted(p.name for p in (run / "run").glob("step_*"))
    assert names == ["step_00000007", "step_00000010", "step_00000014", "step_00000020"]
    assert main(["evaluate", "--checkpoint", str(run / "run"), "--average", "2", "--limit", "2",
                 "--beam", "1", "--results", str(run / "averaged")]) == 0
    assert "weights of steps [10, 20]" in capsys.readouterr().out
    record = _record(run / "results", "train-tiny-cli")
    assert record["steps"] == 20 and record["stop_reason"] == "max_steps"
    assert record["command"].startswith("transformer-book train --config ")
    assert record["final_checkpoint"].endswith("step_00000020")


@pytest.mark.slow
def test_translate_sentences_and_stdin(run, capsys, monkeypatch):
    code = main(["translate", "Ein Mann fährt Fahrrad.", "Zwei Hunde spielen.",
                 "--checkpoint", str(run / "run"), "--beam", "1"])
    assert code == 0
    assert len(capsys.readouterr().out.splitlines()) == 2, "one line per sentence"
    monkeypatch.setattr("sys.stdin", io.StringIO("Ein Hund.\nEine Frau singt.\n"))
    code = main(["translate", "-", "--checkpoint", str(run / "run" / "step_00000010")])
    assert code == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


@pytest.mark.slow
def test_translate_refuses_empty_and_overlong_input(run, capsys):
    assert main(["translate", "", "--checkpoint", str(run / "run")]) == 2
    err = capsys.readouterr().err
    assert "transformer-book translate: error: sentences[0]: expected a non-empty sentence" in err
    long = " ".join(["Fahrrad"] * 150)
    assert main(["translate", "Ein Hund.", long, "--checkpoint", str(run / "run")]) == 2
    err = capsys.readouterr().err
    assert "sentences[1]: expected at most 128 BPE tokens (the model's max_len positions)" in err


@pytest.mark.slow
def test_evaluate_with_limit_and_averaging(run, capsys):
    results = run / "eval-results"
    code = main(["evaluate", "--checkpoint", str(run / "run"), "--split", "val",
                 "--beam", "2", "--limit", "20", "--results", str(results)])
    assert code == 0
    assert "BLEU" in capsys.readouterr().out
    record = _record(results, "evaluate-run-val")
    assert record["num_hypotheses"] == 20 and record["averaged"] == 1
    assert record["signature"].startswith("nrefs:1|case:mixed")
    assert record["lowercase_intl_signature"].startswith("nrefs:1|case:lc")
    assert record["decoding"]["beam_size"] == 2 and record["decoding"]["alpha"] == 0.6
    for key in ("bleu", "bleu_lowercase_intl", "wall_seconds", "git", "hardware", "step"):
        assert key in record, key

    assert record["decoding"]["stop"] == "exact"
    assert record["chrf_signature"].startswith("nrefs:1|case:mixed") and "nw:2" in (
        record["chrf_signature"])
    assert "tok:tercom" in record["ter_signature"]
    assert 0 <= record["chrf"] <= 100 and record["ter"] >= 0
    assert record["selection"]["select"] == "last"
    assert record["selection"]["averaged_steps"] == [20]

    shutil.rmtree(results)
    code = main(["evaluate", "--checkpoint", str(run / "run"), "--beam", "2", "--stop",
                 "k_finished", "--limit", "20", "--results", str(results)])
    assert code == 0
    record = _record(results, "evaluate-run")
    assert record["decoding"]["stop"] == "k_finished"
    assert record["split"] == "val", "the default split: the test set must be asked for"
    capsys.readouterr()  # the evaluation's report and progress bar
    # the strategy's refusal, before the checkpoint is read: one line, exit status 2
    assert main(["evaluate", "--checkpoint", str(run / "run"), "--stop", "early"]) == 2
    assert _one_line(capsys).startswith("transformer-book evaluate: error: --stop: expected")

    shutil.rmtree(results)
    code = main(["evaluate", "--checkpoint", str(run / "run"), "--average", "2",
                 "--limit", "5", "--beam", "1", "--results", str(results)])
    assert code == 0
    record = _record(results, "evaluate-run")
    assert record["averaged"] == 2 and record["checkpoints"][0].endswith("step_00000010")


@pytest.mark.slow
def test_evaluate_refuses_averaging_more_checkpoints_than_exist(run, capsys):
    assert main(["evaluate", "--checkpoint", str(run / "run"), "--average", "5",
                 "--limit", "2", "--results", str(run / "none")]) == 2
    assert "average: expected at most the 2 checkpoints" in capsys.readouterr().err


@pytest.mark.slow
def test_corrupted_checkpoint_is_a_clear_error(run, tmp_path, capsys):
    copy = tmp_path / "step_00000020"
    shutil.copytree(run / "run" / "step_00000020", copy)
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert main(["translate", "Ein Hund.", "--checkpoint", str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("transformer-book translate: error: ")
    assert "model.safetensors: expected sha256" in err and "corrupted" in err


def test_not_a_checkpoint_is_a_clear_error(tmp_path, capsys):
    assert main(["translate", "Ein Hund.", "--checkpoint", str(tmp_path)]) == 2
    assert "checkpoint: expected a checkpoint folder" in capsys.readouterr().err


def test_config_with_unknown_keys_is_a_clear_error(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text('[train]\nmax_steps = 5\nlearning_rate = 0.1\n')
    assert main(["train", "--config", str(config), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("transformer-book train: error: ")
    assert "[train]" in err and "unknown keys ['learning_rate']" in err


@pytest.mark.slow
def test_training_into_a_run_of_another_config_is_refused(run, multi30k_dir, tmp_path, capsys):
    other = tmp_path / "other.toml"
    other.write_text(TINY.format(data_dir=multi30k_dir).replace("max_len = 128", "max_len = 120"))
    assert main(["train", "--config", str(other), "--out", str(run / "run"), "--quiet",
                 "--results", str(tmp_path / "results")]) == 2
    assert "[model] max_len: 128 in the checkpoint, 120 now" in capsys.readouterr().err


def test_a_book_error_is_one_line_and_exit_status_2(monkeypatch, capsys):
    def refuse() -> str:
        raise BookError("prefer: expected cpu, received 'tpu'")

    monkeypatch.setattr("transformer_book.util.env.format_report", refuse)
    assert main(["env"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "transformer-book env: error: prefer: expected cpu, received 'tpu'\n"
    assert captured.out == ""


@pytest.mark.parametrize("bug", [RuntimeError("a bug"), ValueError("a bug"), KeyError("a bug")])
def test_any_other_exception_propagates_with_its_traceback(monkeypatch, capsys, bug):
    def broken() -> str:
        raise bug

    monkeypatch.setattr("transformer_book.util.env.format_report", broken)
    with pytest.raises(type(bug), match="a bug"):
        main(["env"])
    assert capsys.readouterr().err == ""


def test_a_diverged_training_run_exits_with_status_1(monkeypatch, tmp_path, capsys):
    def diverge(*args, **kwargs):
        raise NonFiniteLossError("the loss became nan at step 3")

    monkeypatch.setattr("transformer_book.train.loop.train", diverge)
    config = tmp_path / "run.toml"
    config.write_text('[model]\npreset = "tiny"\n[train]\nmax_steps = 5\n')
    assert main(["train", "--config", str(config), "--out", str(tmp_path / "run")]) == 1
    assert capsys.readouterr().err == (
        "transformer-book train: error: the loss became nan at step 3\n")


def test_bad_limit_is_refused_before_loading_anything(tmp_path, capsys):
    assert main(["evaluate", "--checkpoint", str(tmp_path), "--limit", "0"]) == 2
    assert "--limit: expected an integer >= 1, received 0" in capsys.readouterr().err


# ----------------------------------------------------------------------------- refusals, early

QUICK = '[model]\npreset = "tiny"\n[train]\nmax_steps = 5\n'


def _write_run(folder, multi30k_dir, evals=None):
    """Three checkpoints (steps 1, 2, 3) of an untrained tiny model, with a BPE learnt on
    300 val sentences and short decoding; each records ``evals`` if given."""
    folder.mkdir()
    pairs = load_multi30k("val", "de", "en", str(multi30k_dir))[:300]
    tokenizer = BPETokenizer.train([t for pair in pairs for t in pair], vocab_size=300)
    tokenizer.save(folder / "tokenizer.json")
    run = RunConfig.from_dict({"model": {"preset": "tiny", "overrides": {"max_len": 256}},
                               "data": {"data_dir": str(multi30k_dir)},
                               "decode": {"beam_size": 2, "max_len_a": 0.0, "max_len_b": 3},
                               "train": {"checkpoint_every": 1}})  # as the steps are
    for step in (1, 2, 3):
        torch.manual_seed(step)
        net = Transformer(TransformerConfig.preset("tiny", tokenizer.vocab_size, max_len=256))
        save_checkpoint(folder / checkpoint_name(step), net, step=step,
                        config={"model": net.config.to_dict(), "run": run.to_dict()},
                        tokenizer_path=folder / "tokenizer.json",
                        extra=None if evals is None else {"evals": evals})
    return folder


@pytest.fixture(scope="module")
def saved(multi30k_dir, tmp_path_factory):
    """A run folder written without training (no evaluations recorded)."""
    return _write_run(tmp_path_factory.mktemp("saved") / "run", multi30k_dir)


#: Lowest val loss at step 2, highest greedy BLEU at step 1.
EVALS = [{"step": 1, "val_loss": 4.0, "bleu": 2.0}, {"step": 2, "val_loss": 3.0, "bleu": 1.0},
         {"step": 3, "val_loss": 3.5, "bleu": 0.5}]


@pytest.fixture(scope="module")
def evaluated(multi30k_dir, tmp_path_factory):
    """A run folder like ``saved`` whose newest checkpoint records evaluations."""
    return _write_run(tmp_path_factory.mktemp("evaluated") / "run", multi30k_dir, EVALS)


def test_a_command_line_argparse_cannot_read_is_one_line(capsys):
    assert main(["translate", "Ein Hund.", "--checkpoint", "x", "--beam", "four"]) == 2
    assert "translate: error: argument --beam/--beam-size: invalid int value: 'four'" in \
        _one_line(capsys)
    assert main(["translate"]) == 2
    assert "the following arguments are required" in _one_line(capsys)
    assert main(["fly"]) == 2
    assert "invalid choice: 'fly'" in _one_line(capsys)


def test_a_multi_line_message_is_still_one_line(monkeypatch, capsys):
    def refuse() -> str:
        raise BookError("config: expected a table,\nreceived\n  a list")

    monkeypatch.setattr("transformer_book.util.env.format_report", refuse)
    assert main(["env"]) == 2
    assert _one_line(capsys) == (
        "transformer-book env: error: config: expected a table, received a list\n")


@pytest.mark.parametrize("command", ["translate", "evaluate"])
@pytest.mark.parametrize(("option", "value", "message"), [
    ("--alpha", "inf", "--alpha: expected a finite number >= 0 and <= 10, received inf"),
    ("--alpha", "nan", "--alpha: expected a finite number >= 0 and <= 10, received nan"),
    ("--alpha", "1000", "--alpha: expected a finite number >= 0 and <= 10, received 1000.0"),
    ("--alpha", "-0.5", "--alpha: expected a finite number >= 0 and <= 10, received -0.5"),
    ("--beam", "0", "--beam: expected an integer >= 1, received 0"),
    ("--beam", "-4", "--beam: expected an integer >= 1, received -4"),
    ("--device", "tpu", "--device: expected cpu, cuda, cuda:N or mps, received 'tpu'"),
    ("--device", "cuda:x", "--device: expected cpu, cuda, cuda:N or mps, received 'cuda:x'"),
    ("--device", "cpu:1", "--device: expected a device this machine has"),
    ("--device", "cuda:999", "--device: expected a device this machine has"),
])
def test_decoding_arguments_are_refused_before_the_checkpoint_is_read(command, option, value,
                                                                      message, tmp_path, capsys):
    """The checkpoint does not exist: the refusal names the argument, so it came first."""
    first = ["Ein Hund."] if command == "translate" else []
    assert main([command, *first, "--checkpoint", str(tmp_path / "none"), option, value]) == 2
    assert f"transformer-book {command}: error: {message}" in _one_line(capsys)


def test_a_device_this_machine_lacks_is_refused_before_any_work(monkeypatch, tmp_path, capsys):
    """--device cuda without CUDA was an AssertionError after the BPE was trained, and
    --device tpu a RuntimeError from torch."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = tmp_path / "quick.toml"
    config.write_text(QUICK)
    out = tmp_path / "run"
    for device in ("cuda", "cuda:0", "tpu", "mps:3"):
        assert main(["train", "--config", str(config), "--out", str(out), "--device", device,
                     "--results", str(tmp_path / "results")]) == 2
        assert "train: error: --device: expected " in _one_line(capsys)
        assert not out.exists() and not (tmp_path / "results").exists(), "work was done"
    assert main(["translate", "Ein Hund.", "--checkpoint", str(out), "--device", "cuda"]) == 2
    assert "--device: expected a device this machine has (cpu" in _one_line(capsys)


def test_unusable_output_paths_are_refused_before_any_work(tmp_path, capsys):
    """An existing file as --results (or --out) used to fail after all the training, and
    the record was lost; --hypotheses after all the decoding."""
    config = tmp_path / "quick.toml"
    config.write_text(QUICK)
    afile = tmp_path / "afile"
    afile.write_text("kept\n")
    out = tmp_path / "run"
    cases = [
        (["train", "--config", str(config), "--out", str(out), "--results", str(afile)],
         f"--results: expected a folder this user may write to (or create), received {afile}"),
        (["train", "--config", str(config), "--out", str(afile)], "--out: expected a folder"),
        (["train", "--config", str(config), "--out", str(afile / "run")],
         f"--out: expected a path where a folder can be created, received {afile / 'run'}"),
        (["train", "--config", str(config), "--out", str(out), "--results",
          str(afile / "results")], "--results: expected a path where a folder can be created"),
        (["evaluate", "--checkpoint", str(out), "--results", str(afile)],
         "--results: expected a folder"),
        (["evaluate", "--checkpoint", str(out), "--hypotheses", str(tmp_path)],
         f"--hypotheses: expected a file in an existing folder this user may write to, "
         f"received {tmp_path}, a folder"),
        (["evaluate", "--checkpoint", str(out), "--hypotheses", str(tmp_path / "no" / "h.txt")],
         "--hypotheses: expected a file in an existing folder"),
        (["evaluate", "--checkpoint", str(out), "--split", "dev"],
         "--split: expected one of ['test', 'test_2016_flickr', 'train', 'val', 'valid'], "
         "received 'dev'"),
        (["evaluate", "--checkpoint", str(out), "--max-tokens", "0"],
         "--max-tokens: expected an integer >= 1, received 0"),
        (["translate", "Ein Hund.", "--checkpoint", str(out), "--max-tokens", "-3"],
         "--max-tokens: expected an integer >= 1, received -3"),
        (["evaluate", "--checkpoint", str(out), "--split", "test_2016_flickr"],
         "--plan: expected a plan committed before training (results/plans/*.toml) to read "
         "a test split, received none"),
        (["evaluate", "--checkpoint", str(out), "--plan", str(afile)],
         "--plan: expected only with a test split, received val"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        assert f"error: {message}" in _one_line(capsys), argv
        assert not out.exists(), argv
    assert afile.read_text() == "kept\n"


def test_blank_stdin_lines_stay_blank_lines(saved, monkeypatch, capsys):
    """One blank line used to refuse the whole batch; now each input line gives one output
    line, a blank one for a blank one (so the output lines up with the input)."""
    assert main(["translate", "Ein Hund.", "Eine Frau singt.", "--checkpoint", str(saved)]) == 0
    alone = capsys.readouterr().out.splitlines()
    monkeypatch.setattr("sys.stdin", io.StringIO("Ein Hund.\n\n   \nEine Frau singt.\n"))
    assert main(["translate", "-", "--checkpoint", str(saved)]) == 0
    assert capsys.readouterr().out.splitlines() == [alone[0], "", "", alone[1]]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n \n"))
    assert main(["translate", "-", "--checkpoint", str(saved)]) == 2
    assert "sentences: expected at least one sentence (or - with lines on stdin), received " \
           "only blank lines" in _one_line(capsys)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["translate", "-", "--checkpoint", str(saved)]) == 2
    assert "received none" in _one_line(capsys)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"Ein \xff Hund.\n"),
                                                      encoding="utf-8"))
    assert main(["translate", "-", "--checkpoint", str(saved)]) == 2
    assert "stdin: expected UTF-8 text, one sentence per line" in _one_line(capsys)
    monkeypatch.setattr("sys.stdin", io.StringIO("Ein Hund.\n\n" + "Fahrrad " * 300 + "\n"))
    assert main(["translate", "-", "--checkpoint", str(saved)]) == 2
    assert "non-blank sentences[1]: expected at most 256 BPE tokens" in _one_line(capsys)
    assert main(["translate", "Ein Hund.", " ", "--checkpoint", str(saved)]) == 2
    assert "sentences[1]: expected a non-empty sentence, received ' '" in _one_line(capsys)


def test_a_beam_wider_than_the_vocabulary_is_refused(saved, capsys):
    vocab = load_trained(saved).model_config.vocab_size
    assert main(["translate", "Ein Hund.", "--checkpoint", str(saved), "--beam",
                 str(vocab + 1)]) == 2
    assert f"beam_size: expected an integer >= 1 and <= {vocab}, received {vocab + 1}" in (
        _one_line(capsys))
    assert main(["translate", "Ein Hund.", "--checkpoint", str(saved), "--beam", "2",
                 "--alpha", "10"]) == 0


def test_evaluate_averages_up_to_the_named_checkpoint_and_its_record_agrees(saved, tmp_path,
                                                                            capsys):
    """--checkpoint run/step_2 --average 2 averaged the newest two (steps 2 and 3) and wrote
    step 2 beside them. Now the average is of the checkpoints ending at the named one, or,
    where the loader cannot do that, the command refuses before decoding."""
    results, hypotheses = tmp_path / "results", tmp_path / "hyps.txt"
    argv = ["evaluate", "--checkpoint", str(saved / "step_00000002"), "--average", "2",
            "--limit", "3", "--beam", "1", "--results", str(results),
            "--hypotheses", str(hypotheses)]
    ends_at_named = load_trained(saved / "step_00000002", average=2).checkpoints[-1] == (
        saved / "step_00000002")
    if not ends_at_named:
        assert main(argv) == 2
        assert "--average: expected --checkpoint naming a run folder or its newest " \
               "checkpoint (step_00000003)" in _one_line(capsys)
        assert not results.exists() and not hypotheses.exists()
        return
    assert main(argv) == 0
    record = _record(results, "evaluate-run")
    assert record["step"] == 2 and record["averaged"] == 2
    assert [p.rsplit("/", 1)[-1] for p in record["checkpoints"]] == [
        "step_00000001", "step_00000002"]
    assert len(hypotheses.read_text().splitlines()) == record["num_hypotheses"] == 3


def test_evaluate_of_a_run_folder_averages_its_newest(saved, tmp_path, capsys):
    results = tmp_path / "results"
    for checkpoint in (saved, saved / "step_00000003"):
        assert main(["evaluate", "--checkpoint", str(checkpoint), "--average", "2", "--limit",
                     "2", "--beam", "2", "--results", str(results)]) == 0
        record = _record(results, "evaluate-run")
        assert record["step"] == 3 and record["averaged"] == 2
        assert record["checkpoints"][-1].endswith("step_00000003")
        assert record["decoding"]["alpha"] == 0.6 and record["decoding"]["beam_size"] == 2
        shutil.rmtree(results)


@pytest.mark.parametrize(("select", "average", "chosen", "averaged", "loss", "bleu"), [
    ("best-val", None, 2, [2], 3.0, 1.0),
    ("best-val", 2, 2, [1, 2], 3.0, 1.0),  # 1 and 3 equally near: the earlier
    ("best-val-bleu", 2, 1, [1, 2], 4.0, 2.0),
    ("last", 2, 3, [2, 3], 3.5, 0.5),
])
def test_evaluate_selects_on_val_and_records_why(evaluated, tmp_path, capsys, select, average,
                                                 chosen, averaged, loss, bleu):
    results = tmp_path / "results"
    argv = ["evaluate", "--checkpoint", str(evaluated), "--select", select, "--limit", "3",
            "--beam", "1", "--results", str(results)]
    assert main(argv + (["--average", str(average)] if average else [])) == 0
    out = capsys.readouterr().out
    assert f"checkpoint: step {chosen} by --select {select} (val loss {loss:.4g}, greedy val " \
           f"BLEU {bleu:.4g}), weights of steps {averaged}" in out
    assert "chrF++ " in out and "TER " in out and "nw:2" in out and "tok:tercom" in out
    record = _record(results, "evaluate-run-val")
    assert record["selection"] == {"select": select, "chosen_step": chosen,
                                   "chosen_val_loss": loss, "chosen_val_bleu": bleu,
                                   "averaged_steps": averaged}
    assert [int(p.rsplit("_", 1)[-1]) for p in record["checkpoints"]] == averaged
    assert record["split"] == "val" and record["step"] == max(averaged)
    for key in ("chrf", "chrf_signature", "ter", "ter_signature"):
        assert record[key] is not None, key


def test_evaluate_refuses_a_selection_it_cannot_make(evaluated, saved, tmp_path, capsys):
    """best-val needs a run folder (it chooses among the run's checkpoints) whose training
    recorded evaluations: one line, exit status 2, before any data is read."""
    results = tmp_path / "results"
    base = ["--limit", "2", "--beam", "1", "--results", str(results)]
    cases = [
        (["--checkpoint", str(evaluated / "step_00000002"), "--select", "best-val"],
         "checkpoint: expected a run folder for select='best-val' (it chooses among the run's "
         "kept checkpoints), received"),
        (["--checkpoint", str(saved), "--select", "best-val-bleu"],
         "checkpoint: expected a run folder whose newest checkpoint records the training's "
         "evaluations"),
        (["--checkpoint", str(evaluated), "--select", "best-val", "--average", "4"],
         "average: expected at most the 3 kept checkpoints"),
    ]
    for argv, message in cases:
        assert main(["evaluate", *argv, *base]) == 2, argv
        assert f"transformer-book evaluate: error: {message}" in _one_line(capsys), argv
        assert not results.exists()
    assert main(["evaluate", "--checkpoint", str(evaluated), "--select", "best"]) == 2
    assert "argument --select: invalid choice: 'best'" in _one_line(capsys)


def test_version_and_one_device_rule(capsys, monkeypatch):
    """--version answers; translate and evaluate take the best device, as train does,
    unless --device names one."""
    from transformer_book import __version__
    from transformer_book.cli import _device, build_parser
    from transformer_book.util import env

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"transformer-book {__version__}\n"
    monkeypatch.setattr(env, "_available", lambda kind: kind in ("cpu", "mps"))
    for command in ("translate", "evaluate"):
        argv = [command, *(["Ein Hund."] if command == "translate" else []), "--checkpoint", "x"]
        args = build_parser().parse_args(argv)
        assert args.max_tokens == 4096
        assert _device(args).type == "mps", f"{command}: the best device, as train picks"
        assert _device(build_parser().parse_args([*argv, "--device", "cpu"])).type == "cpu"


def test_evaluate_help_says_the_test_split_is_asked_for(capsys):
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # wrapped at hyphens
    assert "val (default) or test_2016_flickr for Multi30k" in text
    assert "a test split is read only with --plan, once per system" in text
    assert "{last,best-val,best-val-bleu}" in text


def test_translate_sample_as_a_user_runs_it(saved, capsys):
    """--sample draws each token; the same --seed gives the same lines, a tiny --top-p
    (or --temperature) is greedy search, the beam size of the config does not enter."""
    sentences = ["Ein Hund.", "Eine Frau singt.", "Zwei Männer spielen Fußball.", "Ein Kind."]

    def lines(*options: str) -> list[str]:
        assert main(["translate", *sentences, "--checkpoint", str(saved), *options]) == 0
        out = capsys.readouterr().out.splitlines()
        assert len(out) == len(sentences), "one line per sentence"
        return out

    sampled = lines("--sample", "--seed", "3", "--temperature", "2.0", "--top-p", "0.9")
    assert sampled == lines("--sample", "--seed", "3", "--temperature", "2.0", "--top-p", "0.9")
    assert sampled != lines("--sample", "--seed", "4", "--temperature", "2.0", "--top-p", "0.9")
    greedy = lines("--beam", "1")
    assert lines("--sample", "--top-p", "1e-9") == greedy
    assert lines("--sample", "--temperature", "1e-6", "--seed", "5") == greedy
    assert lines("--sample") == lines("--sample", "--seed", "0", "--temperature", "1",
                                      "--top-p", "1"), "the defaults"


@pytest.mark.parametrize(("options", "message"), [
    (["--sample", "--temperature", "0"], "--temperature: expected a finite number > 0, "
                                         "received 0.0"),
    (["--sample", "--temperature", "-1"], "--temperature: expected a finite number > 0"),
    (["--sample", "--temperature", "inf"], "--temperature: expected a finite number > 0, "
                                           "received inf"),
    (["--sample", "--top-p", "0"], "--top-p: expected a finite number > 0 and <= 1, "
                                   "received 0.0"),
    (["--sample", "--top-p", "1.5"], "--top-p: expected a finite number >= 0 and <= 1, "
                                     "received 1.5"),
    (["--sample", "--seed", "-2"], "--seed: expected an integer >= 0 and <= "),
    (["--sample", "--beam", "4"], "--beam: expected a setting of strategy 'sample' "
                                  "(--temperature, --top-p, --seed), received 4"),
    (["--sample", "--alpha", "0.6"], "--alpha: expected a setting of strategy 'sample'"),
    (["--strategy", "sample", "--stop", "k_finished"], "--stop: expected a setting of "
                                                       "strategy 'sample'"),
    (["--strategy", "nucleus"], "--strategy: expected one of ['beam', 'greedy', 'sample'], "
                                "received 'nucleus'"),
    (["--strategy", "greedy", "--beam-size", "2"], "--beam: expected a setting of strategy "
                                                   "'greedy' (none)"),
])
def test_bad_sampling_options_are_refused_before_the_checkpoint_is_read(options, message,
                                                                        tmp_path, capsys):
    """The checkpoint does not exist: the refusal names the option, so it came first."""
    argv = ["translate", "Ein Hund.", "--checkpoint", str(tmp_path / "none"), *options]
    assert main(argv) == 2
    assert f"transformer-book translate: error: {message}" in _one_line(capsys)


@pytest.mark.parametrize("options", [["--temperature", "0.5"], ["--top-p", "0.5"],
                                     ["--seed", "1"]])
def test_a_setting_the_configs_strategy_lacks_is_refused_once_it_is_read(options, saved,
                                                                        capsys):
    """Without --strategy the run config's [decode] strategy decodes (beam search here):
    sampling's settings are refused, naming the option and beam search's own."""
    assert main(["translate", "Ein Hund.", "--checkpoint", str(saved), *options]) == 2
    assert (f"transformer-book translate: error: {options[0]}: expected a setting of "
            "strategy 'beam' (--beam, --alpha, --stop)") in _one_line(capsys)


PLAN = """\
name = "cli-demo"
split = "test_2016_flickr"
systems = ["seed-0"]
val_criterion = "val BLEU, beam 2"
checkpoint_rules = ["last"]
alpha = 0.6
beam = 2
stopping_rule = "max_steps = 20"
seeds = [0]
"""



@pytest.mark.slow
def test_a_test_read_needs_a_plan_committed_before_training_and_happens_once(run, capsys,
                                                                            tmp_path,
                                                                            monkeypatch):
    """The plan rule from the command line: a plan committed after the run started (by its
    start manifest, run.json) is refused, also for a copy of the run or checkpoints touched
    since (their file times once decided); one committed before a run reads the test split
    once for its system, with a ledger line and the translations kept; a second read is
    refused."""
    repo = tmp_path / "repo"
    plan = write_plan(repo, "cli-demo", PLAN, commit=False)
    argv = ["evaluate", "--checkpoint", str(run / "run"), "--split", "test_2016_flickr",
            "--beam", "2", "--plan", str(plan), "--system", "seed-0",
            "--results", str(tmp_path / "records")]
    assert main(argv) == 2
    assert "(not committed)" in _one_line(capsys)
    write_plan(repo, "cli-demo", PLAN)
    for refused, message in ((["--limit", "5"], "--limit: expected none with a test split"),
                             (["--alpha", "0"], "--alpha: expected plan 'cli-demo''s alpha"),
                             (["--select", "best-val"], "--select/--average: expected one of "
                              "plan 'cli-demo''s checkpoint rules ['last'] (--select last)")):
        assert main([*argv, *refused]) == 2, "the plan's whole split, decoding and rule"
        assert message in _one_line(capsys)
    assert main(argv) == 2, "the run was trained before the plan was committed"
    assert "a plan committed before the run" in _one_line(capsys)
    # the two holes of a guard that read the oldest surviving checkpoint's file time: the
    # checkpoints of that run touched since (as when retention deleted the earlier ones),
    # and a copy of it (cp -r: fresh file times); both now carry the run's start
    later = time.time() + 60
    touched, copied = tmp_path / "touched", tmp_path / "copied"
    shutil.copytree(run / "run", touched / "run")
    shutil.copytree(run / "run", copied / "run", copy_function=shutil.copy)
    for checkpoint in (touched / "run").glob("step_*"):
        os.utime(checkpoint, (later, later))
    for folder in (touched, copied):
        assert main([*argv[:2], str(folder / "run"), *argv[3:]]) == 2
        assert "a plan committed before the run" in _one_line(capsys)

    # a run trained after the plan, from the plan's commit (this test's repository stands in
    # for the course's, and its tree is clean)
    from transformer_book.run import start

    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    monkeypatch.setattr(start, "git_commit", lambda: {"commit": head, "dirty": False})
    time.sleep(1.1)  # git keeps whole seconds: the run starts a second after the plan
    config = run / "tiny-cli.toml"
    assert main(["train", "--config", str(config), "--out", str(tmp_path / "later" / "run"),
                 "--results", str(tmp_path / "trained"), "--quiet", "--bleu-sentences", "0",
                 "--val-sentences", "8"]) == 0
    capsys.readouterr()
    argv[2] = str(tmp_path / "later" / "run")
    assert main([*argv, "--system", "seed-9"]) == 2
    assert "--system: expected one of plan 'cli-demo'" in _one_line(capsys)

    def full_disk(ledger, line):
        raise OSError(28, "No space left on device")

    real_append = plans._append

    monkeypatch.setattr(plans, "_append", full_disk)  # the ledger line cannot be written
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "the read is refused, not spent" in captured.err
    assert captured.out.startswith("checkpoint: step 20") and captured.out.count("\n") == 1, (
        "the selection line alone: no score shown")
    assert not list((tmp_path / "records").glob("evaluate-run-test_2016_flickr-*.json")), (
        "no score left on disk without its ledger line")
    assert not (repo / "results" / "test_reads.jsonl").read_text()
    monkeypatch.setattr(plans, "_append", real_append)
    assert main(argv) == 0
    assert "test read entered in the ledger" in capsys.readouterr().out
    (entry,) = [json.loads(line) for line in
                (repo / "results" / "test_reads.jsonl").read_text().splitlines()]
    assert entry["plan"] == "cli-demo" and entry["system"] == "seed-0"
    assert entry["split"] == "test_2016_flickr" and 0 <= entry["bleu"] <= 100
    assert (entry["rule"], entry["beam"], entry["alpha"]) == ("last", 2, 0.6), "the plan's"
    record = _record(tmp_path / "records", "evaluate-run-test_2016_flickr")
    assert entry["bleu"] == record["bleu"], "the ledger's score is the record's"
    kept = repo / entry["translations"]
    assert len(kept.read_text(encoding="utf-8").splitlines()) == 1000, "every sentence"
    assert main(argv) == 2
    assert "a plan reads its split once per system" in _one_line(capsys)


# ----------------------------------------------------------------------------- progress


def test_evaluate_and_translate_show_progress_on_stderr_unless_quiet(saved, tmp_path,
                                                                     monkeypatch, capsys):
    """A tqdm bar of the sentences decoded, on stderr; --quiet: none, and stdout (the report,
    the translations) is the same either way."""
    def evaluate(name: str, *options: str) -> tuple[str, str]:
        """stdout without its record line, and stderr."""
        assert main(["evaluate", "--checkpoint", str(saved), "--limit", "5", "--beam", "2",
                     "--max-tokens", "32", "--results", str(tmp_path / name),
                     "--hypotheses", str(tmp_path / f"{name}.txt"), *options]) == 0
        out, err = capsys.readouterr()
        assert f"record: {tmp_path / name}" in out
        return "\n".join(line for line in out.splitlines() if "record:" not in line), err

    out, err = evaluate("shown")
    assert "translating: 100%" in err and "5/5" in err, err
    assert "sentence/s" in err or "s/sentence" in err, err
    assert evaluate("quiet", "--quiet") == (out, "")
    assert "BLEU" in out and "translating" not in out
    assert (tmp_path / "shown.txt").read_text() == (tmp_path / "quiet.txt").read_text()

    lines = "Ein Hund.\nEine Frau singt.\n\nZwei Männer spielen Fußball.\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    assert main(["translate", "-", "--checkpoint", str(saved)]) == 0
    shown = capsys.readouterr()
    assert "translating: 100%" in shown.err and "3/3" in shown.err, "the non-blank lines"
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    assert main(["translate", "-", "--checkpoint", str(saved), "--quiet"]) == 0
    assert capsys.readouterr() == (shown.out, "")
    assert len(shown.out.splitlines()) == 4, "one line per input line"


def test_a_refusal_after_loading_is_one_line_with_no_bar(saved, tmp_path, capsys):
    """What is checked once the model is loaded (the beam against the vocabulary, each
    sentence's length) is still checked before the bar starts: the refusal comes alone."""
    vocab = load_trained(saved).model_config.vocab_size
    assert main(["evaluate", "--checkpoint", str(saved), "--limit", "2", "--beam",
                 str(vocab + 1), "--results", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "translating" not in captured.err and captured.err.count("\n") == 1, captured.err
    assert f"beam_size: expected an integer >= 1 and <= {vocab}" in captured.err
    assert main(["translate", "Ein Hund.", "Fahrrad " * 300, "--checkpoint", str(saved)]) == 2
    assert "sentences[1]: expected at most 256 BPE tokens" in _one_line(capsys)
