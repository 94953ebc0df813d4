"""The command line end to end: train on a tiny config, translate, evaluate, and its errors:
a BookError is one line and exit status 2, anything else a traceback."""

from __future__ import annotations

import io
import json
import shutil

import pytest

from transformer_book.cli import main
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


def _record(folder, kind):
    found = sorted(folder.glob(f"{kind}-*.json"))
    assert found, f"no {kind} record in {folder}"
    return json.loads(found[-1].read_text())


@pytest.mark.slow
def test_train_writes_checkpoints_and_a_record(run):
    names = sorted(p.name for p in (run / "run").glob("step_*"))
    assert names == ["step_00000010", "step_00000020"]
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
    code = main(["evaluate", "--checkpoint", str(run / "run"), "--split", "test_2016_flickr",
                 "--beam", "2", "--limit", "20", "--results", str(results)])
    assert code == 0
    assert "BLEU" in capsys.readouterr().out
    record = _record(results, "evaluate-run-test_2016_flickr")
    assert record["num_hypotheses"] == 20 and record["averaged"] == 1
    assert record["signature"].startswith("nrefs:1|case:mixed")
    assert record["lowercase_intl_signature"].startswith("nrefs:1|case:lc")
    assert record["decoding"]["beam_size"] == 2 and record["decoding"]["alpha"] == 0.6
    for key in ("bleu", "bleu_lowercase_intl", "wall_seconds", "git", "hardware", "step"):
        assert key in record, key

    assert record["decoding"]["stop"] == "exact"

    shutil.rmtree(results)
    code = main(["evaluate", "--checkpoint", str(run / "run"), "--beam", "2", "--stop",
                 "k_finished", "--limit", "20", "--results", str(results)])
    assert code == 0
    assert _record(results, "evaluate-run")["decoding"]["stop"] == "k_finished"
    with pytest.raises(SystemExit) as refused:  # argparse: usage message, exit status 2
        main(["evaluate", "--checkpoint", str(run / "run"), "--stop", "early"])
    assert refused.value.code == 2 and "invalid choice: 'early'" in capsys.readouterr().err

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
