"""scripts/gpu_run.py, the GPU run in one command, checked end to end on the CPU with tiny
configs: measure each config's step, leave out a config whose share of --minutes would end
inside its learning-rate warm-up, train one config after another (never two children at
once), choose on validation, score once on test, keep to the --minutes budget, bundle the
records."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tarfile
from pathlib import Path

import pytest
from plan_utils import write_plan

from tests.test_cli import TINY
from transformer_book.analysis.compute import peak_flops, training_flops
from transformer_book.util.env import device_name
from transformer_book.util.records import COMMIT_ENV, git_commit

REPO_ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("gpu_run", REPO_ROOT / "scripts" / "gpu_run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gpu_run():
    return _script()


@pytest.fixture
def one_at_a_time(gpu_run, monkeypatch):
    """Every child the script starts and every evaluation it makes in process, as
    ``(kind, what, command)``; starting either while a child still runs fails."""
    started, children = [], []
    original_start, original_load = gpu_run._start, gpu_run.load_trained

    def check(what):
        running = [c for c, p in children if p.poll() is None]
        assert not running, f"{what} started while {running[0][2:4]} still runs"

    def start(command, log, env):
        check(command[2:4])
        process = original_start(command, log, env)
        children.append((command, process))
        kind = command[3] if command[1:3] == ["-m", "transformer_book.cli"] else command[1]
        started.append((kind, command[5] if kind == "train" else None, command))
        return process

    def load_trained(checkpoint, **kwargs):
        check(f"evaluate {checkpoint}")
        started.append(("evaluate", str(checkpoint), None))
        return original_load(checkpoint, **kwargs)

    monkeypatch.setattr(gpu_run, "_start", start)
    monkeypatch.setattr(gpu_run, "load_trained", load_trained)
    return started


def _config(folder: Path, name: str, data_dir: Path, extra: str = "") -> str:
    path = folder / f"{name}.toml"
    path.write_text(TINY.format(data_dir=data_dir).replace("[train]\n", f"[train]\n{extra}"))
    return str(path)


PLAN = """\
name = "gpu-demo"
split = "test_2016_flickr"
systems = ["seed-1"]
val_criterion = "val BLEU, beam 4, alpha 0.6, average of the last 2"
checkpoint_rules = ["last-2"]
alpha = 0.6
beam = 4
stopping_rule = "max_steps = 20"
seeds = [1, 2]
"""


@pytest.mark.slow
def test_trains_chooses_on_val_and_scores_the_choice_on_test(gpu_run, multi30k_dir, tmp_path,
                                                             capsys, one_at_a_time):
    configs = [_config(tmp_path, "tiny-a", multi30k_dir, "seed = 1\n"),
               _config(tmp_path, "tiny-b", multi30k_dir, "seed = 2\n")]
    plan = write_plan(tmp_path / "repo", "gpu-demo", PLAN)
    planned = ["--plan", str(plan), "--system", "seed-1"]
    for refused, message in ((["--limit", "8"], "--limit: expected none with --plan"),
                             (["--average", "5"], "--average: expected one of the plan's")):
        with pytest.raises(SystemExit):  # a partial read, or another rule than the plan's
            gpu_run.main(["--configs", *configs, "--device", "cpu", *planned, *refused])
        assert message in capsys.readouterr().err
    code = gpu_run.main(["--configs", *configs, "--device", "cpu", "--max-steps", "20",
                         "--average", "2", "--results", str(tmp_path / "results"),
                         "--runs", str(tmp_path / "runs"), "--bundle", str(tmp_path / "out"),
                         *planned])
    assert code == 0
    ledger = plan.parents[2] / "results" / "test_reads.jsonl"
    (entry,) = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert entry["plan"] == "gpu-demo" and entry["system"] == "seed-1"
    assert (entry["rule"], entry["beam"], entry["alpha"]) == ("last-2", 4, 0.6)
    kept = (plan.parents[2] / entry["translations"]).read_text().splitlines()
    assert len(kept) == 1000, "the whole split, once"
    printed = capsys.readouterr().out
    with pytest.raises(SystemExit):  # the plan's one read for seed-1 is spent
        gpu_run.main(["--configs", *configs, "--device", "cpu", "--plan", str(plan),
                      "--system", "seed-1"])
    assert "once per system" in capsys.readouterr().err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    runs = summary["runs"]
    assert set(runs) == {"tiny-a", "tiny-b"}
    # one after another: train a, val a, train b, val b, test of the chosen one; each
    # training a child, each evaluation in this process while no child runs
    steps = [(step, what) for step, what, _ in one_at_a_time]
    assert steps == [("train", configs[0]), ("evaluate", str(tmp_path / "runs" / "tiny-a")),
                     ("train", configs[1]), ("evaluate", str(tmp_path / "runs" / "tiny-b")),
                     ("evaluate", str(tmp_path / "runs" / summary["chosen_on_val"]))]
    assert summary["budget_minutes"] == 7.0 and summary["wall_minutes"] < 7.0
    assert 0 < runs["tiny-a"]["budget_minutes"] < 7.0 / 2, "its share of the whole budget"
    assert all(run["steps"] == 20 and "error" not in run for run in runs.values())
    for run in runs.values():  # measured before training, and kept with what training saw
        assert run["estimate"]["seconds_per_step"] > 0 and run["seconds_per_step"] > 0
        assert run["estimate"]["steps_to_warm_up"] == 10  # tiny.toml's warmup_steps
    chosen = summary["chosen_on_val"]
    assert runs[chosen]["val_bleu"] == max(run["val_bleu"] for run in runs.values())
    test = json.loads(Path(summary["test"]["path"]).read_text())
    assert test["split"] == "test_2016_flickr"
    assert (test["limit"], test["decoding"]["beam_size"], test["averaged"]) == (None, 4, 2)
    assert Path(test["checkpoints"][-1]).parent.name == chosen
    assert test["bleu"] == summary["test"]["bleu"]
    assert summary["target_met"] is False  # 20 steps of a tiny model
    with tarfile.open(tmp_path / "out" / "gpu_run.tar.gz") as tar:
        names = sorted(tar.getnames())
    assert sum(n.startswith("results/train-") for n in names) == 2
    assert sum(n.startswith("results/evaluate-") and "-val-" in n for n in names) == 2
    assert sum(n.startswith("results/") and "test_2016_flickr" in n for n in names) == 1
    logs = sorted(n for n in names if n.startswith("logs/"))
    assert logs == sorted(["logs/tiny-a.log", "logs/tiny-b.log", "logs/tiny-a-val.log",
                           "logs/tiny-b-val.log", f"logs/{chosen}-test_2016_flickr.log"])
    assert f"test_2016_flickr, {chosen} (best on val)" in printed


@pytest.mark.slow
def test_a_failed_run_is_reported_and_the_others_go_on(gpu_run, multi30k_dir, tmp_path):
    good = _config(tmp_path, "tiny-good", multi30k_dir)
    bad = _config(tmp_path, "tiny-bad", multi30k_dir, "warmup = 4000\n")  # an unknown key
    code = gpu_run.main(["--configs", bad, good, "--device", "cpu", "--max-steps", "10",
                         "--limit", "4", "--results", str(tmp_path / "results"),
                         "--runs", str(tmp_path / "runs"), "--bundle", str(tmp_path / "out")])
    assert code == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["test"] is None, "no --plan: the test split is not read"
    assert summary["runs"]["tiny-bad"]["error"].startswith("training exited with 2; see ")
    assert "returncode" not in summary["runs"]["tiny-bad"]
    assert summary["chosen_on_val"] == "tiny-good"
    assert "unknown keys ['warmup']" in (tmp_path / "runs" / "tiny-bad.log").read_text()
    code = gpu_run.main(["--configs", bad, "--device", "cpu", "--results",
                         str(tmp_path / "results"), "--runs", str(tmp_path / "runs")])
    assert code == 1, "nothing trained: nothing chosen, a failing exit status"


@pytest.mark.slow
def test_a_hung_or_failing_child_is_an_error_naming_its_log(gpu_run, tmp_path):
    log = tmp_path / "child.log"
    hung = gpu_run._start([sys.executable, "-c", "import time; time.sleep(60)"], log,
                          dict(os.environ))
    with pytest.raises(RuntimeError, match=rf"still running after 0 s, killed; see {log}"):
        gpu_run._finish(hung, log, 0.2)
    assert hung.returncode is not None, "the child is gone, not left behind"
    failing = gpu_run._start([sys.executable, "-c", "print('boom'); raise SystemExit(3)"], log,
                             dict(os.environ))
    with pytest.raises(RuntimeError, match=rf"exited with 3; see {log}"):
        gpu_run._finish(failing, log, 30)
    assert log.read_text() == "boom\n"


def test_configs_must_have_distinct_names(gpu_run, capsys):
    with pytest.raises(SystemExit) as exit_info:
        gpu_run.main(["--configs", "configs/tiny.toml", "other/tiny.toml", "--device", "cpu"])
    assert exit_info.value.code == 2
    assert "distinct names, received ['tiny', 'tiny']" in capsys.readouterr().err


def test_the_default_configs_are_the_gpu_configs(gpu_run):
    assert [Path(c).name for c in gpu_run.CONFIGS] == ["gpu-base.toml", "gpu-small.toml",
                                                        "gpu-wide.toml"]


def test_a_copied_tree_records_the_commit_it_was_given(tmp_path, monkeypatch):
    """On the GPU machine the working tree arrives without .git: the commit comes from
    $TRANSFORMER_BOOK_COMMIT, and is "unknown" without it."""
    monkeypatch.setenv(COMMIT_ENV, "abc123")
    assert git_commit(tmp_path) == {"commit": "abc123", "dirty": None}
    monkeypatch.delenv(COMMIT_ENV)
    assert git_commit(tmp_path) == {"commit": "unknown", "dirty": None}


def test_the_training_time_is_what_is_left_split_among_the_configs_to_go(gpu_run):
    budget = gpu_run.Budget.of(7.0)
    startup, evaluate = gpu_run.STARTUP_SECONDS, gpu_run.EVALUATE_SECONDS
    expected = (420 - 3 * (startup + evaluate) - evaluate) / 3
    assert budget.train_seconds(3) == pytest.approx(expected, abs=1.0)
    budget.startup.append(50.0)  # what was seen replaces the guess
    budget.evaluate += [10.0, 30.0]  # the longest counts
    assert budget.train_seconds(2) == pytest.approx((420 - 2 * 80 - 30) / 2, abs=1.0)


def test_a_budget_too_small_for_a_config_skips_it_and_says_so(gpu_run, tmp_path, capsys,
                                                             one_at_a_time):
    code = gpu_run.main(["--configs", "configs/tiny.toml", "configs/small.toml", "--device",
                         "cpu", "--minutes", "0.5", "--results", str(tmp_path / "results"),
                         "--runs", str(tmp_path / "runs"), "--bundle", str(tmp_path / "out")])
    assert code == 1, "nothing trained: no test score"
    assert one_at_a_time == [], "no child started"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    for run in summary["runs"].values():
        assert run["error"].startswith("not trained: ") and "--minutes budget" in run["error"]
    assert summary["chosen_on_val"] is None and summary["test"] is None
    assert "train tiny: not trained" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["--minutes", "0"], "--minutes: expected a positive number, received 0.0"),
    (["--minutes", "nan"], "--minutes: expected a positive number, received nan"),
])
def test_bad_arguments_are_refused_before_any_work(gpu_run, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        gpu_run.main([*argv, "--device", "cpu"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_cuda_tests_and_mfu_run_first_and_are_bundled(gpu_run, multi30k_dir, tmp_path,
                                                      one_at_a_time):
    config = _config(tmp_path, "tiny-c", multi30k_dir)
    code = gpu_run.main(["--configs", config, "--device", "cpu", "--max-steps", "4",
                         "--limit", "4", "--cuda-tests", "--mfu", "--mfu-args",
                         "--config configs/tiny.toml --steps 1 --tokens 64 --warmup 0 "
                         "--modes eager", "--results", str(tmp_path / "results"),
                         "--runs", str(tmp_path / "runs"), "--bundle", str(tmp_path / "out")])
    assert code == 0
    first = [c[1:5] for _, _, c in one_at_a_time[:2]]
    assert first[0][:3] == ["-m", "pytest", "-m"] and first[1][0].endswith("mfu.py")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["cuda_tests"]["passed"] is True  # skipped on a CPU: nothing failed
    assert "skipped" in summary["cuda_tests"]["summary"]
    mfu = json.loads(Path(summary["mfu"]["record"]).read_text())
    assert mfu["kind"] == "mfu" and mfu["config"] == "tiny" and "error" not in summary["mfu"]
    assert summary["mfu"]["modes"]["eager"]["tokens_per_second"] > 0
    with tarfile.open(tmp_path / "out" / "gpu_run.tar.gz") as tar:
        names = tar.getnames()
    assert f"results/{Path(summary['mfu']['record']).name}" in names
    assert {"logs/cuda-tests.log", "logs/mfu.log"} <= set(names)


def test_a_step_is_measured_on_the_device_it_will_train_on(gpu_run, tmp_path):
    args = gpu_run.parse_args(["--device", "cpu", "--runs", str(tmp_path)])
    step = gpu_run.estimate("configs/tiny.toml", args)
    assert step["seconds_per_step"] > 0 and step["first_step_seconds"] > 0
    assert step["timed_steps"] == gpu_run.ESTIMATE_STEPS
    assert (step["device_name"], step["precision"]) == (device_name("cpu"), "fp32")
    assert (step["tokens_per_side"], step["warmup_steps"]) == (512, 10)  # tiny.toml
    assert step["steps_to_warm_up"] == 10
    args.max_steps = 4  # a run cut short by --max-steps warms up only as far as it goes
    assert gpu_run.estimate("configs/tiny.toml", args)["steps_to_warm_up"] == 4
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nwarmup = 4000\n")
    assert gpu_run.estimate(str(bad), args)["error"].startswith("could not be measured (")


def _as_if_on_a_t4(mfu: float):
    """``time_steps`` as a T4 would answer it at ``mfu``: the step's FLOPs over that share
    of the T4's fp16 peak (the model and the batch are the real ones, built on the CPU)."""

    def time_steps(trainer, batch, warmup, steps, device):
        pairs, length = batch.micro[0][0].shape
        flops = len(batch.micro) * training_flops(trainer.model.config, length, length, pairs)
        seconds = flops / (mfu * peak_flops("T4", "fp16"))
        return {"warmup_seconds": [seconds] * warmup, "step_seconds": [seconds] * steps,
                "total_seconds": seconds * steps}

    return time_steps


def test_a_budget_that_ends_inside_the_warm_up_is_resized(gpu_run, monkeypatch, tmp_path):
    """The default plan on a T4: at 7 minutes gpu-base's share ends long before its 1,500
    warm-up steps, so it is left out and its time goes to the others; every config kept can
    finish its warm-up; a budget that fits them all keeps them all."""
    monkeypatch.setattr(gpu_run, "time_steps", _as_if_on_a_t4(0.25))
    args = gpu_run.parse_args(["--device", "cpu", "--runs", str(tmp_path)])
    estimates = {config: gpu_run.estimate(config, args) for config in gpu_run.CONFIGS}
    base = next(config for config in gpu_run.CONFIGS if config.endswith("gpu-base.toml"))
    assert estimates[base]["steps_to_warm_up"] == 1500
    dropped = gpu_run.fit_to_budget(gpu_run.CONFIGS, estimates, gpu_run.Budget.of(7.0))
    assert base in dropped and len(dropped) < len(gpu_run.CONFIGS)
    assert "inside its 1,500-step learning-rate warm-up" in dropped[base]
    budget = gpu_run.Budget.of(7.0)
    kept = [config for config in gpu_run.CONFIGS if config not in dropped]
    for config in kept:  # each share carries its run through its warm-up
        assert gpu_run.warm_up_shortfall(budget.train_seconds(len(kept)), estimates[config]) \
            is None
    warm_ups = [e["steps_to_warm_up"] * e["seconds_per_step"] for e in estimates.values()]
    per_run = gpu_run.STARTUP_SECONDS + gpu_run.EVALUATE_SECONDS
    enough = (len(estimates) * (max(warm_ups) + per_run) + gpu_run.EVALUATE_SECONDS) / 60 + 1
    assert gpu_run.fit_to_budget(gpu_run.CONFIGS, estimates, gpu_run.Budget.of(enough)) == {}


def test_the_warm_up_check_at_its_boundary(gpu_run):
    step = {"seconds_per_step": 0.5, "steps_to_warm_up": 100, "device_name": "T4"}
    assert gpu_run.warm_up_shortfall(50.0, step) is None  # 100 steps: warmed up
    why = gpu_run.warm_up_shortfall(49.0, step)
    assert why == ("0.82 min of the --minutes budget is about 98 steps at 0.5 s a step on T4, "
                   "inside its 100-step learning-rate warm-up (which needs 0.8 min)")
    unmeasured = {"error": "could not be measured (...)"}
    assert gpu_run.warm_up_shortfall(1.0, unmeasured) is None  # its training says what fails
    assert "no time" in gpu_run.warm_up_shortfall(0.0, unmeasured)


def test_a_run_that_would_end_inside_its_warm_up_is_not_started(gpu_run, tmp_path, capsys,
                                                               monkeypatch, one_at_a_time):
    """Through the whole command: a tiny config at a measured-looking 10 s a step needs 100 s
    to warm up, more than a 2-minute budget leaves it; nothing starts, and the summary keeps
    the estimate and says why."""
    def ten_seconds_a_step(trainer, batch, warmup, steps, device):
        return {"warmup_seconds": [10.0] * warmup, "step_seconds": [10.0] * steps,
                "total_seconds": 10.0 * steps}

    monkeypatch.setattr(gpu_run, "time_steps", ten_seconds_a_step)
    code = gpu_run.main(["--configs", "configs/tiny.toml", "--device", "cpu", "--minutes", "2",
                         "--results", str(tmp_path / "results"), "--runs",
                         str(tmp_path / "runs"), "--bundle", str(tmp_path / "out")])
    assert code == 1, "nothing trained"
    assert one_at_a_time == [], "no child started"
    run = json.loads((tmp_path / "out" / "summary.json").read_text())["runs"]["tiny"]
    assert run["estimate"]["seconds_per_step"] == 10.0
    assert run["error"].startswith("not trained: ")
    assert "inside its 10-step learning-rate warm-up (which needs 1.7 min)" in run["error"]
    printed = capsys.readouterr().out
    assert "estimate tiny: 10 s a step on" in printed
    assert "plan resized: 0 of 1 configs trained" in printed
