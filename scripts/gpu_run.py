"""The course's GPU run in one command: check, measure, train, choose on validation, score on test.

Usage, from the repository root, on any machine with a CUDA GPU (the package's dependencies
installed, Multi30k in ``$TRANSFORMER_BOOK_DATA`` or downloadable)::

    python scripts/gpu_run.py [--minutes 7] [--cuda-tests] [--mfu] [--configs configs/gpu-*.toml]
                              [--device cuda] [--results results] [--runs runs] [--bundle DIR]

1. ``--cuda-tests``: ``pytest -m cuda tests/test_cuda.py`` (mixed precision against fp32,
   fast attention against the teaching path, cached decoding, checkpoints and
   ``torch.compile`` on the GPU). A failure is reported and the run goes on (exit status 1).
2. ``--mfu``: ``benchmarks/mfu.py``, the base model's tokens/s and MFU, eager and compiled
   (its record, ``mfu-*.json``, goes to ``--results``; ``--mfu-args`` passes it options).
3. Measures each config's step on ``--device`` (:func:`estimate`: a fresh model, a few
   training steps on a batch of its ``max_tokens``, timed after the first) and resizes the
   plan: a config whose share of ``--minutes`` would end inside its learning-rate warm-up
   (``warmup_steps``, before ``max_steps``) is reported and not trained, and its time goes to
   the others (:func:`fit_to_budget`); the estimates and the resizing are in the summary.
4. Trains the configs **one after another**, each with the GPU to itself: side by side they
   would contend for it, which confounds the choice on val and deflates every tokens/s
   figure. Each run is scored on the validation split as Section 6.1 does (beam 4,
   α = 0.6, the average of its last 5 checkpoints) as soon as it has trained.
5. With ``--plan`` (a plan of :mod:`transformer_book.run.plans`, committed before this
   command starts, so before its training) and ``--system``, scores only the best of them
   on val once on test_2016_flickr, the same way; the read joins
   ``results/test_reads.jsonl`` with its translations kept. Without ``--plan`` the test
   split is not read. Choosing on validation and measuring once, under a plan, on test
   keeps the test score honest. The plan is checked with git: a copied tree without
   ``.git`` runs without ``--plan`` (validation only).

``--minutes`` is the whole pipeline's wall time (default 7: start-up, the CUDA tests and the
MFU benchmark when asked, training and every evaluation fit in about 7 minutes on an
H100/H200-class GPU). The training time is what is left after the steps before it, less a
reserve for each run's start-up and evaluations (first guessed, then the longest observed),
split evenly among the configs still to train; a config whose share would not carry it
through its warm-up at its measured step time is reported and skipped (before training
starts and again when its turn comes), and the test evaluation of the chosen run always
happens.

Each training run is a ``transformer-book train`` child process; each evaluation runs in
this process (:func:`transformer_book.inference.evaluate`) while no child runs. Each writes
its own JSON record into ``--results``, exactly as a user's ``train`` and ``evaluate`` do;
chapter 11's quality ladder reads them from there. ``--bundle DIR`` also writes
``summary.json`` (the budget, the runs, the choice, the test score, the checks) and
``gpu_run.tar.gz`` (the records under ``results/``, the logs under ``logs/``) into DIR, to
carry the results of a remote GPU machine home: there, ``python scripts/gpu_run.py --cuda-tests
--mfu --bundle gpu_results/``; back in the checkout, ``tar xzf gpu_results/gpu_run.tar.gz
results`` (CONTRIBUTING.md, "The GPU run"). A copy of the working tree without ``.git``
records the commit given in ``$TRANSFORMER_BOOK_COMMIT``.

The target is sacreBLEU >= 42 on test_2016_flickr de -> en (40 is the floor). ``--device cpu
--max-steps 2 --limit 20 --configs configs/tiny.toml`` runs the same pipeline on a CPU in
seconds, to check it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's package, as the children's PYTHONPATH
sys.path.insert(0, str(ROOT / "benchmarks"))  # the MFU benchmark's training step

import torch  # noqa: E402 (after the path: a copy of the tree need not be installed)
from mfu import new_trainer, synthetic_batch, time_steps  # noqa: E402 (benchmarks/mfu.py)

from transformer_book.inference.evaluation import evaluate, write_evaluation  # noqa: E402
from transformer_book.inference.trained import load_trained  # noqa: E402
from transformer_book.run.checkpoint import (  # noqa: E402
    list_checkpoints,
    off_grid_steps,
    read_metadata,
    read_step,
)
from transformer_book.run.config import load_run_config  # noqa: E402
from transformer_book.run.plans import (  # noqa: E402
    LEDGER,
    load_plan,
    open_test_read,
    repository_root,
    require_readable,
)
from transformer_book.train.corpus import StepBatch  # noqa: E402
from transformer_book.train.runtime import resolve_precision  # noqa: E402
from transformer_book.util.env import device_name, get_device  # noqa: E402
from transformer_book.util.records import git_commit  # noqa: E402
from transformer_book.util.validation import BookError  # noqa: E402

# As paths from the current folder, which the children share: relative from the repository root.
CONFIGS = [os.path.relpath(p) for p in sorted((ROOT / "configs").glob("gpu-*.toml"))]
TARGET_BLEU, FLOOR_BLEU = 42.0, 40.0
TEST_SPLIT = "test_2016_flickr"  # read once, under --plan
# First guesses of the time beyond training, on an H100/H200-class GPU; then the longest seen.
STARTUP_SECONDS = 20.0  # a train run beyond --max-minutes: imports, CUDA, last eval, checkpoint
EVALUATE_SECONDS = 25.0  # an evaluation: 5 checkpoints averaged, beam 4 over 1,014 sentences
ESTIMATE_STEPS = 3  # timed training steps per config, after one untimed (allocation, tuning)
ESTIMATE_LENGTH = 24  # tokens a sentence in the estimate's batch (chapter 12's Multi30k shape)
CHECK_SECONDS = 600.0  # the CUDA tests or the MFU benchmark are killed after this


@dataclass
class Budget:
    """The pipeline's deadline and the estimates of what is not training."""

    deadline: float
    startup: list[float] = field(default_factory=list)
    evaluate: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, minutes: float) -> Budget:
        return cls(time.perf_counter() + 60.0 * minutes)

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def startup_seconds(self) -> float:
        return max(self.startup, default=STARTUP_SECONDS)

    def evaluate_seconds(self) -> float:
        return max(self.evaluate, default=EVALUATE_SECONDS)

    def train_seconds(self, configs_left: int) -> float:
        """This run's share: what is left, less the start-up and val evaluation of every
        run still to go and the one test evaluation, over the runs still to go."""
        reserve = configs_left * (self.startup_seconds() + self.evaluate_seconds())
        return (self.left() - reserve - self.evaluate_seconds()) / configs_left


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "transformer_book.cli", *args]


def _environment() -> dict[str, str]:
    """The children import the package from ``src`` (installed or not); one child at a
    time, each with every CPU."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _record(output: str) -> dict:
    """The JSON record named by the ``record: PATH`` line that ``train``, ``evaluate`` and
    the MFU benchmark print, with its ``path``."""
    lines = [line for line in output.splitlines() if line.startswith("record: ")]
    if not lines:
        raise RuntimeError(f"no 'record:' line in the output:\n{output[-2000:]}")
    path = lines[-1].removeprefix("record: ").strip()
    return {**json.loads(Path(path).read_text()), "path": path}


def _start(command: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    """Run ``command`` in the background, its output into ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as handle:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env)


def _wait(process: subprocess.Popen, log: Path, timeout: float) -> int:
    """``process``'s exit status; killed after ``timeout`` seconds (a ``RuntimeError``)."""
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise RuntimeError(f"still running after {timeout:.0f} s, killed; see {log}") from None


def _finish(process: subprocess.Popen, log: Path, timeout: float) -> dict:
    """Wait for ``process`` (killed after ``timeout`` seconds); its record, or a
    ``RuntimeError`` that says what went wrong and where the log is."""
    code = _wait(process, log, timeout)
    if code != 0:
        raise RuntimeError(f"exited with {code}; see {log}")
    return _record(log.read_text())


def cuda_tests(args: argparse.Namespace, env: dict[str, str]) -> dict:
    """``pytest -m cuda tests/test_cuda.py``: passed or not, its last line, its log."""
    log = args.runs / "cuda-tests.log"
    command = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-rs",
               str(ROOT / "tests" / "test_cuda.py")]
    print(f"cuda tests: {' '.join(command[1:])}", flush=True)
    started = time.perf_counter()
    try:
        code = _wait(_start(command, log, env), log, CHECK_SECONDS)
        lines = log.read_text().strip().splitlines()
        note = lines[-1] if lines else ""
    except RuntimeError as error:
        code, note = None, str(error)
    result = {"passed": code == 0, "exit_code": code, "summary": note, "log": str(log),
              "seconds": time.perf_counter() - started}
    print(f"cuda tests: {'passed' if result['passed'] else 'FAILED'} ({note})", flush=True)
    return result


def mfu_benchmark(args: argparse.Namespace, env: dict[str, str]) -> dict:
    """``benchmarks/mfu.py`` on ``--device``: its record's path and figures, and an
    ``error`` if it failed (a mode that failed still leaves the record of the others)."""
    log = args.runs / "mfu.log"
    command = [sys.executable, str(ROOT / "benchmarks" / "mfu.py"), "--device", args.device,
               "--results", str(args.results), *shlex.split(args.mfu_args)]
    print(f"mfu: {' '.join(command[1:])}", flush=True)
    started = time.perf_counter()
    result: dict = {"log": str(log)}
    try:
        code = _wait(_start(command, log, env), log, CHECK_SECONDS)
        if code != 0:
            result["error"] = f"exited with {code}; see {log}"
        record = _record(log.read_text())
    except RuntimeError as error:  # killed, or no record written
        result.setdefault("error", str(error))
        record = None
    if record is not None:
        result["record"] = record["path"]
        result["modes"] = {mode: {k: row.get(k) for k in (
            "tokens_per_second", "seconds_per_step", "flops_per_second", "mfu", "error")}
            for mode, row in record["modes"].items()}
        for mode, row in result["modes"].items():
            shown = "n/a" if row["mfu"] is None else f"{100 * row['mfu']:.1f} %"
            print(f"mfu {mode}: " + (f"failed: {row['error']}" if row["error"] else
                                     f"{row['tokens_per_second']:,.0f} tokens/s, MFU {shown}"),
                  flush=True)
    if "error" in result:
        print(f"mfu: {result['error']}", flush=True)
    return {**result, "seconds": time.perf_counter() - started}


def estimate(config: str, args: argparse.Namespace) -> dict:
    """Seconds a training step of ``config`` takes on ``--device``: a fresh model of its
    ``[model]``, Adam and eq. 3 of its ``[train]`` in the precision ``train`` resolves, on a
    batch of ``[data] max_tokens`` random ids a side (sentences of :data:`ESTIMATE_LENGTH`,
    ``accumulation`` micro-batches a step); one untimed step, then :data:`ESTIMATE_STEPS`
    timed (the MFU benchmark's step and clock). With the steps the run needs to come out of
    its learning-rate warm-up: ``warmup_steps``, or ``max_steps`` if fewer. A config that
    cannot be built or stepped gets an ``error`` instead (its training reports why)."""
    try:
        run_config = load_run_config(config)
        model = run_config.model_config(run_config.data.vocab_size)
        device = get_device(args.device)
        t = run_config.train
        precision = resolve_precision(t.precision, device)
        one = synthetic_batch(model, run_config.data.max_tokens, ESTIMATE_LENGTH, device, 0)
        batch = StepBatch(one.micro * t.accumulation, one.target_tokens * t.accumulation,
                          one.source_tokens * t.accumulation)
        trainer = new_trainer(run_config, model, precision, device, False, "inductor", 0)
        timing = time_steps(trainer, batch, 1, ESTIMATE_STEPS, device)
    except (BookError, RuntimeError, OSError) as error:  # a bad config, out of memory
        why = f"{type(error).__name__}: {error}".splitlines()[0]
        return {"error": f"could not be measured ({why}): trained without the warm-up check"}
    finally:
        trainer = one = batch = None  # the memory goes back before the children train
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    max_steps = t.max_steps if args.max_steps is None else args.max_steps
    return {"seconds_per_step": timing["total_seconds"] / ESTIMATE_STEPS,
            "first_step_seconds": timing["warmup_seconds"][0], "timed_steps": ESTIMATE_STEPS,
            "device_name": device_name(device), "precision": precision,
            "tokens_per_side": run_config.data.max_tokens * t.accumulation,
            "warmup_steps": t.warmup_steps, "steps_to_warm_up": min(t.warmup_steps, max_steps)}


def warm_up_shortfall(seconds: float, step: dict) -> str | None:
    """Why ``seconds`` of training would stop the run of ``step`` (an :func:`estimate`)
    inside its learning-rate warm-up, or ``None`` if they carry it through. The evaluations
    during training are not counted, so the check errs towards training. Without a measured
    step only a share of no time at all is refused."""
    if "error" in step:
        return None if seconds > 0 else "no time of the --minutes budget left for it"
    per_step, needed = step["seconds_per_step"], step["steps_to_warm_up"]
    if seconds >= needed * per_step:
        return None
    return (f"{max(seconds, 0) / 60:.2f} min of the --minutes budget is about "
            f"{max(seconds, 0) / per_step:,.0f} steps at {per_step:.3g} s a step on "
            f"{step['device_name']}, inside its {needed:,}-step learning-rate warm-up "
            f"(which needs {needed * per_step / 60:.1f} min)")


def _describe(step: dict) -> str:
    if "error" in step:
        return step["error"]
    warm_up = step["steps_to_warm_up"] * step["seconds_per_step"]
    return (f"{step['seconds_per_step']:.3g} s a step on {step['device_name']} "
            f"({step['precision']}, {step['tokens_per_side']:,} tokens a side): "
            f"{step['steps_to_warm_up']:,} steps to warm up in {warm_up / 60:.1f} min")


def fit_to_budget(configs: list[str], estimates: dict[str, dict],
                  budget: Budget) -> dict[str, str]:
    """The configs to leave out, with why: while the even share of the time left would stop
    some config inside its warm-up, the one whose warm-up takes longest goes, and its time
    goes to the others."""
    kept, dropped = list(configs), {}
    while kept:
        share = budget.train_seconds(len(kept))
        short = {config: why for config in kept
                 if (why := warm_up_shortfall(share, estimates[config])) is not None}
        if not short:
            break
        worst = max(short, key=lambda c: estimates[c].get("steps_to_warm_up", 0)
                    * estimates[c].get("seconds_per_step", 0))  # an unmeasured one last
        dropped[worst] = short[worst]
        kept.remove(worst)
    return dropped


def train_one(config: str, seconds: float, args: argparse.Namespace, env: dict[str, str],
              budget: Budget) -> dict:
    """One ``transformer-book train`` for at most ``seconds`` (the GPU to itself)."""
    name = Path(config).stem
    out, log = args.runs / name, args.runs / f"{name}.log"
    run = {"config": config, "out": str(out), "log": str(log), "budget_minutes": seconds / 60}
    command = _cli("train", "--config", config, "--out", str(out), "--results",
                   str(args.results), "--max-minutes", f"{seconds / 60:.4f}", "--device",
                   args.device, "--no-resume", "--quiet")
    if args.max_steps is not None:
        command += ["--max-steps", str(args.max_steps)]
    print(f"train {name} ({seconds / 60:.2f} min): {' '.join(command[2:])}", flush=True)
    started = time.perf_counter()
    try:
        record = _finish(_start(command, log, env), log,
                         seconds + 3 * budget.startup_seconds() + 120)
    except RuntimeError as error:
        print(f"train {name}: {error}", flush=True)
        return {**run, "error": f"training {error}"}
    wall = time.perf_counter() - started
    if wall > seconds:  # ran to its budget: the rest was start-up and the last evaluation
        budget.startup.append(wall - seconds)
    print(f"train {name}: {record['steps']} steps in {record['train_seconds'] / 60:.1f} min",
          flush=True)
    return {**run, "train_record": record["path"], "steps": record["steps"],
            "train_minutes": record["train_seconds"] / 60,  # the whole run
            "seconds_per_step": record["seconds_per_step"]}  # measured: the estimate's check


def _averageable(out: str) -> int:
    """How many checkpoints :func:`load_trained` can average at the run's newest: it and
    the earlier ones on the run's ``checkpoint_every`` grid (those written at evaluations
    off the grid are not averaged, :func:`transformer_book.run.checkpoint.off_grid_steps`)."""
    found = list_checkpoints(out)
    if not found:
        return 1  # load_trained says what is missing
    meta = read_metadata(found[-1])
    off = off_grid_steps(meta.get("extra", {}).get("evals"),
                         meta["config"]["run"]["train"]["checkpoint_every"])
    return 1 + sum(read_step(path) not in off for path in found[:-1])


def evaluate_one(name: str, run: dict, split: str, args: argparse.Namespace,
                 budget: Budget) -> dict | None:
    """One run scored with Section 6.1's protocol (beam 4, α = 0.6, the average of its last
    ``--average`` checkpoints), in this process (:func:`transformer_book.inference.evaluate`),
    while no child runs: its ``evaluate`` record, written into ``--results`` as
    ``transformer-book evaluate`` writes it, with its ``path``; or ``None`` (the failure is
    noted in ``run`` as ``error``). What it prints goes to ``<runs>/<name>-<split>.log`` too."""
    log = args.runs / f"{name}-{split}.log"
    started = time.perf_counter()
    try:
        average = min(args.average, _averageable(run["out"]))
        trained = load_trained(run["out"], device=args.device, average=average)
        evaluation = evaluate(trained, split=split, limit=args.limit, beam_size=4, alpha=0.6)
        path = write_evaluation(args.results, evaluation, trained, args.command,
                                time.perf_counter() - started)
    except (BookError, RuntimeError, OSError) as error:  # a bad run, CUDA out of memory
        run["error"] = f"evaluate on {split} failed: {error}"
        log.write_text(f"{run['error']}\n")
        print(f"evaluate {name} on {split}: {run['error']}", flush=True)
        return None
    finally:
        trained = None  # the GPU's memory goes back before the next child trains
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    log.write_text(f"{evaluation}\nrecord: {path}\n")
    budget.evaluate.append(time.perf_counter() - started)
    return {**json.loads(path.read_text()), "path": str(path),
            "hypotheses": evaluation.hypotheses, "bleu_95": evaluation.bleu_interval}


def _rule(average: int) -> str:
    """The plan's name of the checkpoint rule ``--average`` asks for (the last ones)."""
    return "last" if average == 1 else f"last-{average}"


def read_test(name: str, run: dict, args: argparse.Namespace, budget: Budget) -> dict | None:
    """``name`` scored on the test split through the plan's one door
    (:func:`~transformer_book.run.plans.open_test_read`): with the plan's decoding and its
    rule ``last-<--average>`` (refused when fewer checkpoints can be averaged), the ledger
    line written before any score is shown; a read that cannot be entered is refused, its
    record and log removed. ``None`` when it was not read (the reason noted in ``run``)."""
    root = repository_root(args.plan)
    try:
        with open_test_read(args.test_plan, args.system, TEST_SPLIT, root) as read:
            if _averageable(run["out"]) < args.average:
                raise BookError(f"--average: expected {args.average} checkpoints to average, "
                                f"as the plan's rule says, received {_averageable(run['out'])}")
            test = evaluate_one(name, run, TEST_SPLIT, args, budget)
            if test is None:
                return None
            kept = read.record(
                {key: test.get(key) for key in ("bleu", "signature", "chrf", "ter", "bleu_95")},
                test["hypotheses"], commit=git_commit(root).get("commit"),
                record=test["path"], rule=_rule(args.average), beam=4, alpha=0.6,
                scored=[test["path"], args.runs / f"{name}-{TEST_SPLIT}.log"])
    except BookError as error:
        run["error"] = f"test not read: {error}"
        print(run["error"], flush=True)
        return None
    print(f"test read entered in the ledger; translations: {kept}", flush=True)
    return test


def train_and_validate(args: argparse.Namespace, env: dict[str, str],
                       budget: Budget) -> dict[str, dict]:
    """Every config in turn: its share of the time left, trained, scored on val."""
    estimates = {}
    for config in args.configs:
        estimates[config] = step = (
            estimate(config, args) if budget.train_seconds(1) > 0
            else {"error": "not measured: no time of the --minutes budget left to train"})
        print(f"estimate {Path(config).stem}: {_describe(step)}", flush=True)
    dropped = fit_to_budget(args.configs, estimates, budget)
    if dropped:
        print(f"plan resized: {len(args.configs) - len(dropped)} of {len(args.configs)} "
              "configs trained, the time of the others shared among them", flush=True)
    kept = [config for config in args.configs if config not in dropped]
    runs = {}
    for config in args.configs:
        name = Path(config).stem
        seconds = budget.train_seconds(len(kept)) if config in kept else 0.0
        why = dropped.get(config) or warm_up_shortfall(seconds, estimates[config])
        if config in kept:
            kept.remove(config)
        if why is not None:
            runs[name] = {"config": config, "estimate": estimates[config],
                          "error": f"not trained: {why}"}
            print(f"train {name}: {runs[name]['error']}", flush=True)
            continue
        runs[name] = run = {**train_one(config, seconds, args, env, budget),
                            "estimate": estimates[config]}
        if "error" in run:
            continue
        val = evaluate_one(name, run, "val", args, budget)
        if val is not None:
            run.update(val_bleu=val["bleu"], val_record=val["path"])
            print(f"val {name}: BLEU {val['bleu']:.2f}, average of {val['averaged']} "
                  "checkpoints", flush=True)
    return runs


def _summary(runs: dict[str, dict], chosen: str | None, test: dict | None) -> dict:
    keep = ("config", "out", "log", "budget_minutes", "estimate", "train_record", "steps",
            "train_minutes", "seconds_per_step", "val_bleu", "val_record", "error")
    summary = {
        "target_bleu": TARGET_BLEU,
        "floor_bleu": FLOOR_BLEU,
        "runs": {name: {k: run[k] for k in keep if k in run} for name, run in runs.items()},
        "chosen_on_val": chosen,
        "test": None,
        "target_met": False,
    }
    if test is not None:
        summary["test"] = {k: test.get(k) for k in (
            "bleu", "signature", "bleu_lowercase_intl", "lowercase_intl_signature",
            "brevity_penalty", "averaged", "step", "limit", "hardware", "path")}
        summary["target_met"] = test["limit"] is None and test["bleu"] >= TARGET_BLEU
    return summary


def _bundle(folder: Path, summary: dict, records: list[str], logs: list[Path]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with tarfile.open(folder / "gpu_run.tar.gz", "w:gz") as tar:
        for path in records:
            tar.add(path, arcname=f"results/{Path(path).name}")
        for log in logs:
            tar.add(log, arcname=f"logs/{log.name}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=CONFIGS, help="run configs to train")
    parser.add_argument("--minutes", type=float, default=7.0,
                        help="the whole pipeline's wall-time budget (default 7)")
    parser.add_argument("--cuda-tests", action="store_true", help="run tests/test_cuda.py first")
    parser.add_argument("--mfu", action="store_true", help="run benchmarks/mfu.py first")
    parser.add_argument("--mfu-args", default="", help="options for benchmarks/mfu.py")
    parser.add_argument("--max-steps", type=int, default=None, help="override max_steps")
    parser.add_argument("--device", default="cuda", help="cuda (default), cpu, ...")
    parser.add_argument("--average", type=int, default=5, help="checkpoints to average")
    parser.add_argument("--limit", type=int, default=None, help="evaluate K sentences only")
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs")
    parser.add_argument("--bundle", type=Path, default=None, help="also write summary here")
    parser.add_argument("--plan", type=Path, default=None,
                        help="the committed plan under which test is read (without: val only)")
    parser.add_argument("--system", default=None, help="with --plan: the plan's system name")
    args = parser.parse_args(argv)
    if (args.plan is None) != (args.system is None):
        parser.error("--plan and --system: expected both or neither")
    args.test_plan = None
    if args.plan is not None:
        if args.limit is not None:
            parser.error(f"--limit: expected none with --plan (a test read scores the whole "
                         f"split, once), received {args.limit}")
        try:
            args.test_plan = load_plan(args.plan)
            require_readable(args.test_plan, args.system, TEST_SPLIT,
                             repository_root(args.plan) / LEDGER)
        except BookError as error:
            parser.error(str(error))
        fields, rule = args.test_plan.fields, _rule(args.average)
        if (fields["beam"], fields["alpha"]) != (4, 0.6):
            parser.error(f"--plan: expected a plan decoding as this script does (beam 4, "
                         f"alpha 0.6), received beam {fields['beam']}, alpha {fields['alpha']}")
        if rule not in fields["checkpoint_rules"]:
            parser.error(f"--average: expected one of the plan's checkpoint rules "
                         f"{fields['checkpoint_rules']}, received {args.average} ({rule})")
    args.command = ["python", "scripts/gpu_run.py", *(sys.argv[1:] if argv is None else argv)]
    names = [Path(config).stem for config in args.configs]
    if len(set(names)) != len(names):
        parser.error(f"--configs: expected configs with distinct names, received {names}")
    if not args.minutes > 0:
        parser.error(f"--minutes: expected a positive number, received {args.minutes}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA GPU is visible (use --device cpu to check "
                     "the pipeline)")
    return args


def _write_bundle(args: argparse.Namespace, summary: dict, runs: dict[str, dict],
                  test: dict | None) -> None:
    records = [run[key] for run in runs.values()
               for key in ("train_record", "val_record") if key in run]
    records += [test["path"]] if test else []
    records += [summary["mfu"]["record"]] if summary.get("mfu", {}).get("record") else []
    logs = [args.runs / f"{name}{suffix}.log" for name in runs
            for suffix in ("", "-val", f"-{TEST_SPLIT}")]
    logs += [args.runs / "cuda-tests.log", args.runs / "mfu.log"]
    _bundle(args.bundle, summary, records, [log for log in logs if log.exists()])
    print(f"bundle: {args.bundle / 'summary.json'}, {args.bundle / 'gpu_run.tar.gz'}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    budget, env = Budget.of(args.minutes), _environment()
    started = time.perf_counter()
    checks = {}
    if args.cuda_tests:
        checks["cuda_tests"] = cuda_tests(args, env)
    if args.mfu:
        checks["mfu"] = mfu_benchmark(args, env)
    runs = train_and_validate(args, env, budget)
    scored = {name: run for name, run in runs.items() if "val_bleu" in run}
    chosen = max(scored, key=lambda name: scored[name]["val_bleu"]) if scored else None
    test = None
    if chosen is not None and args.test_plan is not None:
        test = read_test(chosen, runs[chosen], args, budget)
    elif chosen is not None:
        print("test not read: no --plan (a test split is read only under a committed plan)",
              flush=True)
    summary = {**_summary(runs, chosen, test), **checks, "budget_minutes": args.minutes,
               "wall_minutes": (time.perf_counter() - started) / 60}
    if test is not None:
        print(f"{TEST_SPLIT}, {chosen} (best on val): BLEU {test['bleu']:.2f} "
              f"({test['signature']}); target {TARGET_BLEU:.0f}: "
              f"{'met' if summary['target_met'] else 'not met'}", flush=True)
    print(f"wall time {summary['wall_minutes']:.1f} min of {args.minutes:g}", flush=True)
    if args.bundle is not None:
        _write_bundle(args, summary, runs, test)
    failed_checks = (not checks.get("cuda_tests", {"passed": True})["passed"]
                     or "error" in checks.get("mfu", {}))
    done = test is not None if args.test_plan is not None else chosen is not None
    return 0 if done and not failed_checks else 1


if __name__ == "__main__":
    sys.exit(main())
