"""Plans and the ledger: a test split is read only under a plan committed before training.

The course makes every choice on val. A test split is read only for a system a plan names,
the plan committed to git before that system's training started, and at most once per
system: the plan fixes in advance what is compared (its variants and seeds), how the
checkpoint is chosen on val, the decoding (beam, α) and the stopping rule, so the test
score cannot steer a choice. Every read is one line of the ledger
``results/test_reads.jsonl`` (time, commit, plan, system, split, score), and its
translations are kept under ``results/translations/`` (one file per read, one line per
sentence) so a later system can be compared with it by the paired bootstrap test
(:func:`transformer_book.inference.compare_systems`).

A plan is a small TOML file under ``results/plans/``::

    name = "small-steps-3seeds"
    split = "test_2016_flickr"           # the split this plan reads, once per system
    systems = ["seed-0", "seed-1", "seed-2"]
    config = "configs/small.toml"
    val_criterion = "val BLEU, beam 4, alpha 0.6"
    checkpoint_rules = ["last", "best-val", "last-5"]
    alpha = 0.6
    beam = 4
    stopping_rule = "max_steps = 6000"
    seeds = [0, 1, 2]

Reads made before the ledger existed are entered from the records of ``results/`` with
``"before_ledger": true`` and no plan.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from transformer_book.util.files import atomic_write_text
from transformer_book.util.records import utc_timestamp
from transformer_book.util.validation import BookError, require

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["LEDGER", "PLANS", "TRANSLATIONS", "Plan", "ledger_entries", "load_plan",
           "record_test_read", "repository_root", "require_planned_before", "require_readable"]

#: Where, relative to the repository, plans, the ledger and kept translations live.
PLANS = Path("results/plans")
LEDGER = Path("results/test_reads.jsonl")
TRANSLATIONS = Path("results/translations")

REQUIRED: dict[str, type | tuple[type, ...]] = {
    "name": str, "split": str, "systems": list, "val_criterion": str, "checkpoint_rules": list,
    "alpha": (int, float), "beam": int, "stopping_rule": str, "seeds": list}


@dataclass(frozen=True)
class Plan:
    """A committed plan: what it may read, for which systems, and since which commit."""

    path: Path
    name: str
    split: str
    systems: tuple[str, ...]
    fields: dict[str, Any]
    commit: str  # the commit that first added the plan file
    committed_at: str  # that commit's time, ISO 8601


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise BookError(f"--plan: git could not answer ({' '.join(args)}): "
                        f"{done.stderr.strip() or done.returncode}")
    return done.stdout.strip()


def repository_root(path: str | Path) -> Path:
    """The top folder of the git repository holding the plan ``path`` (its ledger and
    translations live there, under ``results/``)."""
    return _repository(Path(path))


def _repository(path: Path) -> Path:
    folder = path.resolve().parent
    done = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel"],
                          capture_output=True, text=True, check=False)
    require(done.returncode == 0, "--plan", "a plan file inside a git repository", str(path))
    return Path(done.stdout.strip())


def load_plan(path: str | Path) -> Plan:
    """Read and check a plan, refusing one that is not committed or differs from HEAD.

    Raises :class:`BookError` naming what is wrong: a missing file, a field missing or of
    the wrong type, a plan git does not track, or one with uncommitted changes.
    """
    path = Path(path)
    require(path.is_file(), "--plan", "an existing plan file (results/plans/*.toml)",
            str(path))
    try:
        fields = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise BookError(f"--plan: {path} is not valid TOML: {error}") from None
    for key, kind in REQUIRED.items():
        require(key in fields, f"--plan {path}", f"a field {key!r}", sorted(fields))
        require(isinstance(fields[key], kind) and not isinstance(fields[key], bool),
                f"--plan {path} field {key!r}", f"a {getattr(kind, '__name__', kind)}",
                fields[key])
    systems = tuple(str(system) for system in fields["systems"])
    require(len(systems) > 0 and len(set(systems)) == len(systems),
            f"--plan {path} field 'systems'", "distinct system names", list(systems))
    root = _repository(path)
    relative = path.resolve().relative_to(root).as_posix()
    tracked = subprocess.run(["git", "-C", str(root), "ls-files", "--error-unmatch", relative],
                             capture_output=True, text=True, check=False)
    require(tracked.returncode == 0, "--plan", "a plan committed to git before its training",
            f"{relative} (not committed)")
    changed = _git(root, "status", "--porcelain", "--", relative)
    require(changed == "", "--plan", "a plan whose committed text is what is read",
            f"{relative} (uncommitted changes)")
    first = _git(root, "log", "--diff-filter=A", "--format=%H %cI", "--", relative).splitlines()
    require(bool(first), "--plan", "a plan with a commit that added it", relative)
    commit, committed_at = first[-1].split(" ", 1)
    return Plan(path=path, name=str(fields["name"]), split=str(fields["split"]),
                systems=systems, fields=fields, commit=commit, committed_at=committed_at)


def require_planned_before(plan: Plan, started: float, what: str) -> None:
    """Refuse a plan committed after ``started`` (a POSIX time: when the training of
    ``what`` began, e.g. its first checkpoint's time): the plan must come first."""
    committed = datetime.fromisoformat(plan.committed_at).timestamp()
    # git keeps whole seconds: a commit in the same second as the start is not before it
    began = datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds")
    require(committed < math.floor(started), "--plan",
            f"a plan committed before {what} began training ({began})",
            f"{plan.name!r} committed {plan.committed_at}")


def ledger_entries(ledger: str | Path) -> list[dict[str, Any]]:
    """The ledger's lines, oldest first (an absent ledger has none)."""
    ledger = Path(ledger)
    if not ledger.exists():
        return []
    entries = []
    for number, line in enumerate(ledger.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                raise BookError(f"{ledger} line {number}: not JSON: {line[:60]!r}") from None
    return entries


def require_readable(plan: Plan, system: str, split: str, ledger: str | Path) -> None:
    """Refuse a read the plan does not allow: another split, a system the plan does not
    name, or a system whose split the ledger shows read already."""
    require(split == plan.split, "--split", f"the split plan {plan.name!r} reads "
            f"({plan.split})", split)
    require(system in plan.systems, "--system", f"one of plan {plan.name!r}'s systems "
            f"{list(plan.systems)}", system)
    for entry in ledger_entries(ledger):
        if (entry.get("plan") == plan.name and entry.get("system") == system
                and entry.get("split") == split):
            raise BookError(f"--plan: plan {plan.name!r} read {split} for {system!r} "
                            f"already ({entry.get('time')}, BLEU {entry.get('bleu')}); "
                            "a plan reads its split once per system")


def record_test_read(plan: Plan, system: str, split: str, scores: dict[str, Any],
                     hypotheses: Sequence[str], *, root: str | Path,
                     commit: str | None = None, record: str | None = None) -> Path:
    """Keep the translations and append one ledger line; returns the translations' path.

    ``scores`` holds at least ``bleu`` (and may hold ``chrf``, ``ter``, signatures and the
    bootstrap interval). The translations are written first (atomically), then the ledger
    is rewritten atomically with the new line at its end, so a kill leaves either the old
    ledger or the new one. A hypothesis holding a line break is kept on one line.
    """
    require("bleu" in scores, "scores", "a dict with 'bleu'", sorted(scores))
    root = Path(root)
    require_readable(plan, system, split, root / LEDGER)
    translations = root / TRANSLATIONS / f"{plan.name}.{system}.{split}.txt"
    translations.parent.mkdir(parents=True, exist_ok=True)
    # one line per sentence: a line break inside a hypothesis becomes a space (sacreBLEU's
    # tokenisers treat both as white space, so the scores are unchanged)
    atomic_write_text(translations, "".join(" ".join(line.splitlines()) + "\n"
                                            for line in hypotheses))
    entry = {"time": utc_timestamp(), "commit": commit, "plan": plan.name,
             "plan_file": plan.path.resolve().relative_to(root.resolve()).as_posix(),
             "plan_commit": plan.commit, "system": system, "split": split,
             **scores, "translations": translations.relative_to(root).as_posix(),
             "record": record, "before_ledger": False}
    ledger = root / LEDGER
    old = ledger.read_text(encoding="utf-8") if ledger.exists() else ""
    if old and not old.endswith("\n"):
        old += "\n"
    atomic_write_text(ledger, old + json.dumps(entry, sort_keys=True) + "\n")
    return translations
