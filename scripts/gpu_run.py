"""The course's GPU run in one command: train, choose on validation, score on test.

Usage, from the repository root, on a machine with a CUDA GPU::

    python scripts/gpu_run.py [--minutes 5] [--configs configs/gpu-*.toml] [--device cuda]
                              [--results results] [--runs runs] [--bundle DIR]

1. Trains every config side by side on the one GPU, one process each, each for at most
   ``--minutes`` (models this size leave a modern GPU mostly idle, so they share it well).
2. Scores every run on the validation split as Section 6.1 does: beam 4, α = 0.6, the
   average of its last 5 checkpoints.
3. Scores only the best of them on test_2016_flickr, the same way. Choosing on validation
   and measuring once on test keeps the test score honest.

Every step runs the ``transformer-book`` command line, so each training run and each
evaluation writes its own JSON record into ``--results``, exactly as a user's run does;
chapter 11's quality ladder reads them from there. ``--bundle DIR`` also writes
``summary.json`` (the runs, the choice, the test score) and ``gpu_run.tar.gz`` (the records
and the training logs) into DIR, for a machine whose files come back through one folder
(the course's device tool: ``--bundle "$OUT"``; CONTRIBUTING.md gives the whole call).

The target is sacreBLEU >= 40 on test_2016_flickr de -> en. ``--device cpu --max-steps 2
--limit 20 --configs configs/tiny.toml`` runs the same pipeline in seconds, to check it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# As paths from the current folder, which the children share: relative from the repository root.
CONFIGS = [os.path.relpath(p) for p in sorted((ROOT / "configs").glob("gpu-*.toml"))]
TARGET_BLEU = 40.0
SLACK_SECONDS = 240  # beyond the training budget: start-up, the last evaluation, an evaluate run


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "transformer_book.cli", *args]


def _environment(threads: int) -> dict[str, str]:
    """The children import the package from ``src`` (installed or not) and share the CPUs."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _record(output: str) -> dict:
    """The JSON record named by the ``record: PATH`` line that ``train`` and ``evaluate``
    print, with its ``path``."""
    lines = [line for line in output.splitlines() if line.startswith("record: ")]
    if not lines:
        raise RuntimeError(f"no 'record:' line in the output:\n{output}")
    path = lines[-1].removeprefix("record: ").strip()
    return {**json.loads(Path(path).read_text()), "path": path}


def _start(command: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    """Run ``command`` in the background, its output into ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as handle:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env)


def _finish(process: subprocess.Popen, log: Path, timeout: float) -> dict:
    """Wait for ``process`` (killed after ``timeout`` seconds); its record, or a
    ``RuntimeError`` that says what went wrong and where the log is."""
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise RuntimeError(f"still running after {timeout:.0f} s, killed; see {log}") from None
    if code != 0:
        raise RuntimeError(f"exited with {code}; see {log}")
    return _record(log.read_text())


def train_all(args: argparse.Namespace, env: dict[str, str]) -> dict[str, dict]:
    """One ``transformer-book train`` per config, side by side; ``{name: run}``."""
    started = {}
    for config in args.configs:
        name = Path(config).stem
        out, log = args.runs / name, args.runs / f"{name}.log"
        command = _cli("train", "--config", config, "--out", str(out), "--results",
                       str(args.results), "--max-minutes", str(args.minutes), "--device",
                       args.device, "--no-resume", "--quiet")
        if args.max_steps is not None:
            command += ["--max-steps", str(args.max_steps)]
        print(f"train {name}: {' '.join(command[2:])}", flush=True)
        started[name] = ({"config": config, "out": str(out), "log": str(log)},
                         _start(command, log, env))
    runs = {}
    for name, (run, process) in started.items():
        try:
            record = _finish(process, Path(run["log"]), args.minutes * 60 + SLACK_SECONDS)
            run.update(train_record=record["path"], steps=record["steps"],
                       train_minutes=record["train_seconds"] / 60)  # the whole run
            print(f"train {name}: {run['steps']} steps in {run['train_minutes']:.1f} min",
                  flush=True)
        except RuntimeError as error:
            run["error"] = f"training {error}"
            print(f"train {name}: {error}", flush=True)
        runs[name] = run
    return runs


def evaluate_all(runs: dict[str, dict], split: str, args: argparse.Namespace,
                 env: dict[str, str]) -> dict[str, dict]:
    """``transformer-book evaluate`` of each run, side by side, with Section 6.1's protocol
    (beam 4, α = 0.6, the average of the last ``--average`` checkpoints); ``{name: record}``
    of those that succeeded (a failure is noted in its run as ``error``)."""
    started = {}
    for name, run in runs.items():
        average = min(args.average, len(list(Path(run["out"]).glob("step_*"))))
        command = _cli("evaluate", "--checkpoint", run["out"], "--split", split, "--beam", "4",
                       "--alpha", "0.6", "--average", str(average), "--results",
                       str(args.results), "--device", args.device)
        if args.limit is not None:
            command += ["--limit", str(args.limit)]
        log = args.runs / f"{name}-{split}.log"
        started[name] = (log, _start(command, log, env))
    records = {}
    for name, (log, process) in started.items():
        try:
            records[name] = _finish(process, log, SLACK_SECONDS)
        except RuntimeError as error:
            runs[name]["error"] = f"evaluate on {split} {error}"
            print(f"evaluate {name} on {split}: {error}", flush=True)
    return records


def _summary(runs: dict[str, dict], chosen: str | None, test: dict | None) -> dict:
    keep = ("config", "out", "log", "train_record", "steps", "train_minutes",
            "val_bleu", "val_record", "error")
    summary = {
        "target_bleu": TARGET_BLEU,
        "runs": {name: {k: run[k] for k in keep if k in run} for name, run in runs.items()},
        "chosen_on_val": chosen,
        "test": None,
        "target_met": False,
    }
    if test is not None:
        summary["test"] = {k: test[k] for k in ("bleu", "signature", "bleu_lowercase_intl",
                                                "lowercase_intl_signature", "brevity_penalty",
                                                "averaged", "step", "limit", "hardware", "path")}
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=CONFIGS, help="run configs to train")
    parser.add_argument("--minutes", type=float, default=5.0, help="training budget per run")
    parser.add_argument("--max-steps", type=int, default=None, help="override max_steps")
    parser.add_argument("--device", default="cuda", help="cuda (default), cpu, ...")
    parser.add_argument("--average", type=int, default=5, help="checkpoints to average")
    parser.add_argument("--limit", type=int, default=None, help="evaluate K sentences only")
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs")
    parser.add_argument("--bundle", type=Path, default=None, help="also write summary here")
    args = parser.parse_args(argv)
    names = [Path(config).stem for config in args.configs]
    if len(set(names)) != len(names):
        parser.error(f"--configs: expected configs with distinct names, received {names}")
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: no CUDA GPU is visible (use --device cpu to check "
                         "the pipeline)")
    started = time.perf_counter()
    env = _environment(max(1, (os.cpu_count() or 1) // len(args.configs)))
    runs = train_all(args, env)
    trained = {name: run for name, run in runs.items() if "error" not in run}
    for name, val in evaluate_all(trained, "val", args, env).items():
        runs[name].update(val_bleu=val["bleu"], val_record=val["path"])
        print(f"val {name}: BLEU {val['bleu']:.2f}, average of {val['averaged']} checkpoints",
              flush=True)
    scored = {name: run for name, run in runs.items() if "val_bleu" in run}
    chosen = max(scored, key=lambda name: scored[name]["val_bleu"]) if scored else None
    test = None
    if chosen is not None:
        test = evaluate_all({chosen: scored[chosen]}, "test_2016_flickr", args, env).get(chosen)
    summary = _summary(runs, chosen, test)
    summary["wall_minutes"] = (time.perf_counter() - started) / 60
    if test is not None:
        print(f"test_2016_flickr, {chosen} (best on val): BLEU {test['bleu']:.2f} "
              f"({test['signature']}); target {TARGET_BLEU:.0f}: "
              f"{'met' if summary['target_met'] else 'not met'}", flush=True)
    if args.bundle is not None:
        records = [run[key] for run in runs.values()
                   for key in ("train_record", "val_record") if key in run]
        logs = [args.runs / f"{name}{suffix}.log" for name in runs
                for suffix in ("", "-val", "-test_2016_flickr")]
        _bundle(args.bundle, summary, records + ([test["path"]] if test else []),
                [log for log in logs if log.exists()])
        print(f"bundle: {args.bundle / 'summary.json'}, {args.bundle / 'gpu_run.tar.gz'}")
    return 0 if test is not None else 1


if __name__ == "__main__":
    sys.exit(main())
