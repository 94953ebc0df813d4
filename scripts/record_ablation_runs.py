"""Record the ablation runs a cache folder holds, so that a fresh machine reads them.

    python scripts/record_ablation_runs.py --cache ~/.cache/transformer_book/course/ch13 \\
        --name ch13 --results results

Chapter 13 trains thirty runs (ten variants of Table 3, three seeds) through
:func:`transformer_book.analysis.ablation.run_ablation`, which keeps each finished run in the
course's cache as ``run-<key>.json``, the key a hash of everything the run depends on. This
script gathers those files, as the chapter wrote them, into one record
``results/ablation-runs-<name>-<UTC time>.json`` (the runs by key, the hardware, the command
and the commit). The chapter passes the record to ``run_ablation(recorded=...)``: a run whose
key is in it is read, not trained, and a run that changed (another config, data, seed or
step count) has another key and is trained.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from transformer_book.util.records import command_line, git_commit, hardware_info, write_record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True, help="the folder of run-<key>.json files")
    parser.add_argument("--name", required=True, help="the record's name, e.g. ch13")
    parser.add_argument("--results", default="results")
    args = parser.parse_args(argv)
    folder = Path(args.cache).expanduser()
    files = sorted(folder.glob("run-*.json"))
    if not files:
        print(f"--cache: expected a folder of run-<key>.json files, received {folder} "
              "with none", file=sys.stderr)
        return 2
    runs = {}
    for path in files:
        stored = json.loads(path.read_text(encoding="utf-8"))
        if f"run-{stored.get('key')}.json" != path.name:
            print(f"--cache: {path.name} holds the key {stored.get('key')!r}, not its own",
                  file=sys.stderr)
            return 2
        runs[stored["key"]] = stored["result"]
    record = {"runs": runs, "hardware": hardware_info("cpu"), "command": command_line(),
              **git_commit()}
    path = write_record(args.results, "ablation-runs", args.name, record)
    print(f"{len(runs)} runs -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
