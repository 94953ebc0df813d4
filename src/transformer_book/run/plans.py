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

The one door to a test split is :func:`open_test_read`: it holds the ledger's lock
(``results/test_reads.lock``) from the check that the system is unread to the ledger line,
so two reads of one system at once cannot both happen, and refuses before anything is read
when the ledger could not be written. Its :meth:`PlannedRead.record` appends the line (one
write, flushed to disk) and must come before any score is shown: a read whose line could
not be written is refused, not spent. The ledger is only ever appended to.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from transformer_book.run.start import START_MANIFEST, read_start_manifest
from transformer_book.util.files import atomic_write_text
from transformer_book.util.records import utc_timestamp
from transformer_book.util.validation import BookError, bad_input, require

try:  # POSIX; elsewhere the ledger is written unlocked
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["LEDGER", "PLANS", "TRANSLATIONS", "Plan", "PlannedRead", "checkpoint_rule",
           "ledger_entries", "load_plan", "open_test_read", "record_test_read",
           "repository_root", "require_plan_precedes", "require_planned_before",
           "require_readable"]

#: Where, relative to the repository, plans, the ledger and kept translations live.
PLANS = Path("results/plans")
LEDGER = Path("results/test_reads.jsonl")
TRANSLATIONS = Path("results/translations")

REQUIRED: dict[str, type | tuple[type, ...]] = {
    "name": str, "split": str, "systems": list, "val_criterion": str, "checkpoint_rules": list,
    "alpha": (int, float), "beam": int, "stopping_rule": str, "seeds": list}
#: A plan's name and its systems become file names (``<name>.<system>.<split>.txt``).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
#: The checkpoint rules a plan may name: ``last`` or ``best-val`` (lowest val loss), with
#: ``-N`` the average of N checkpoints (``load_trained``'s ``select`` and ``average``).
CHECKPOINT_RULE = re.compile(r"(?P<select>last|best-val)(?:-(?P<average>[2-9]|[1-9]\d+))?")


def checkpoint_rule(name: str) -> dict[str, Any] | None:
    """The checkpoints a rule reads, as ``{"select", "average"}``; ``None``: no such rule."""
    match = CHECKPOINT_RULE.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        return None
    return {"select": match["select"],
            "average": int(match["average"]) if match["average"] else None}


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
    _check_values(path, fields)
    systems = tuple(fields["systems"])
    root = _repository(path)
    relative = path.resolve().relative_to(root).as_posix()
    tracked = subprocess.run(["git", "-C", str(root), "ls-files", "--error-unmatch", relative],
                             capture_output=True, text=True, check=False)
    require(tracked.returncode == 0, "--plan", "a plan committed to git before its training",
            f"{relative} (not committed)")
    changed = _git(root, "status", "--porcelain", "--", relative)
    require(changed == "", "--plan", "a plan whose committed text is what is read",
            f"{relative} (uncommitted changes)")
    # its date is its last change: a plan amended after a run began is no plan for that run
    last = _git(root, "log", "-1", "--format=%H %cI", "--", relative)
    require(bool(last), "--plan", "a plan with a commit that added it", relative)
    commit, committed_at = last.split(" ", 1)
    return Plan(path=path, name=str(fields["name"]), split=str(fields["split"]),
                systems=systems, fields=fields, commit=commit, committed_at=committed_at)


def _check_values(path: Path, fields: dict[str, Any]) -> None:
    """The values a read depends on, in range: names that are names, a beam of 1 or more, a
    finite α of 0 or more, seeds and systems that are non-empty and distinct, known rules."""
    def field(key: str) -> str:
        return f"--plan {path} field {key!r}"

    for key, values in (("name", [fields["name"]]), ("systems", fields["systems"])):
        require(all(isinstance(v, str) and NAME.fullmatch(v) for v in values), field(key),
                "names of letters, digits, '-' and '_' (they become file names)", values)
    systems, seeds, rules = fields["systems"], fields["seeds"], fields["checkpoint_rules"]
    require(len(systems) > 0 and len(set(systems)) == len(systems), field("systems"),
            "distinct system names", systems)
    require(len(seeds) > 0 and len(set(map(repr, seeds))) == len(seeds)
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in seeds),
            field("seeds"), "distinct integers of 0 or more", seeds)
    require(fields["beam"] >= 1, field("beam"), "a beam size of 1 or more", fields["beam"])
    require(math.isfinite(fields["alpha"]) and fields["alpha"] >= 0, field("alpha"),
            "a finite length penalty of 0 or more", fields["alpha"])
    require(len(rules) > 0 and all(checkpoint_rule(rule) for rule in rules), field(
        "checkpoint_rules"), "rules such as 'last', 'last-5', 'best-val', 'best-val-5'", rules)


def require_plan_precedes(plan: Plan, run_dir: str | Path, what: str) -> dict[str, Any]:
    """Refuse a read of the run in ``run_dir`` unless ``plan`` came first, by the run's start
    manifest (:mod:`transformer_book.run.start`, written before step 1 and carried by any
    copy): the plan committed before the run started, in the history of the commit the run
    started from, and that commit clean (no uncommitted changes trained it). Returns the
    manifest. A run without one (started before manifests were written) is refused."""
    manifest = read_start_manifest(run_dir)
    require(manifest is not None, "--plan", f"a run whose start manifest ({START_MANIFEST}, "
            "written before its first step) says when it began", f"{what}, which has none")
    assert manifest is not None  # for the type checker
    require_planned_before(plan, manifest["started"], what)
    root = _repository(plan.path)
    ancestor = subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor",
                               plan.commit, str(manifest["commit"])],
                              capture_output=True, text=True, check=False)
    require(ancestor.returncode == 0, "--plan", f"a plan in the history of the commit {what} "
            "started from", f"plan commit {plan.commit[:12]}, run commit "
            f"{str(manifest['commit'])[:12]}")
    require(manifest.get("dirty") is False, "--plan", "a run started from a clean tree "
            "(its commit says what code trained it)", f"{what}, started with uncommitted "
            f"changes (dirty: {manifest.get('dirty')})")
    return manifest


def require_planned_before(plan: Plan, started: float, what: str) -> None:
    """Refuse a plan committed after ``started`` (a POSIX time: when the training of
    ``what`` began, as its start manifest says): the plan must come first."""
    committed = datetime.fromisoformat(plan.committed_at).timestamp()
    # git keeps whole seconds: a commit in the same second as the start is not before it
    began = datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds")
    require(committed < math.floor(started), "--plan",
            f"a plan committed before {what} began training ({began})",
            f"{plan.name!r} committed {plan.committed_at}")


def ledger_entries(ledger: str | Path) -> list[dict[str, Any]]:
    """The ledger's lines, oldest first (an absent ledger has none); a ledger that cannot be
    read, or a line that is not a JSON object, is refused (``BookError``) by line number."""
    ledger = Path(ledger)
    if not ledger.exists():
        return []
    try:
        text = ledger.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise bad_input("ledger", "a readable UTF-8 file of JSON lines", f"{ledger} ({error})"
                        ) from None
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                entry = None
            if not isinstance(entry, dict):
                raise BookError(f"{ledger} line {number}: expected a JSON object, received "
                                f"{line[:60]!r}")
            entries.append(entry)
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


@dataclass(frozen=True)
class PlannedRead:
    """A read of ``split`` for ``system`` under ``plan``, allowed by
    :func:`open_test_read` and not yet entered: :meth:`record` enters it."""

    plan: Plan
    system: str
    split: str
    root: Path

    def record(self, scores: dict[str, Any], hypotheses: Sequence[str], *,
               commit: str | None = None, record: str | None = None,
               scored: Sequence[str | Path] = (), **fields: Any) -> Path:
        """Keep the translations and append this read's ledger line; returns the
        translations' path. Call it before any score is shown: when it fails (the ledger or
        the translations cannot be written) the read is refused, with nothing entered, and
        the translations and the files ``scored`` names (the records holding the score) are
        removed, so no score of a test split is left on disk without its ledger line.

        ``scores`` holds at least ``bleu`` (and may hold ``chrf``, ``ter``, signatures and
        the bootstrap interval); ``fields`` are entered beside them (e.g. ``rule``). The
        translations are written first (atomically), then the line is appended in one
        write and flushed to disk. A hypothesis holding a line break is kept on one line.
        """
        require("bleu" in scores, "scores", "a dict with 'bleu'", sorted(scores))
        plan, root = self.plan, self.root
        translations = root / TRANSLATIONS / f"{plan.name}.{self.system}.{self.split}.txt"
        entry = {"time": utc_timestamp(), "commit": commit, "plan": plan.name,
                 "plan_file": plan.path.resolve().relative_to(root.resolve()).as_posix(),
                 "plan_commit": plan.commit, "system": self.system, "split": self.split,
                 **scores, **fields, "translations": translations.relative_to(root).as_posix(),
                 "record": record, "before_ledger": False}
        line = (json.dumps(entry, sort_keys=True) + "\n").encode("utf-8")
        try:
            translations.parent.mkdir(parents=True, exist_ok=True)
            # one line per sentence: a line break inside a hypothesis becomes a space
            # (sacreBLEU's tokenisers treat both as white space: the scores are unchanged)
            atomic_write_text(translations, "".join(" ".join(h.splitlines()) + "\n"
                                                    for h in hypotheses))
            _append(root / LEDGER, line)
        except OSError as error:
            for path in (translations, *scored):
                Path(path).unlink(missing_ok=True)
            raise bad_input("ledger", "a ledger line written before the score is shown",
                            f"{root / LEDGER}: {error}; the read is refused, not spent"
                            ) from None
        return translations


def _append(ledger: Path, line: bytes) -> None:
    """Append ``line`` to ``ledger`` in one write (after a newline if its last line lacks
    one), flushed to disk."""
    descriptor = os.open(ledger, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(descriptor).st_size
        if size and os.pread(descriptor, 1, size - 1) != b"\n":
            line = b"\n" + line
        written = os.write(descriptor, line)
        if written != len(line):
            raise OSError(f"wrote {written} of {len(line)} bytes")
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def open_test_read(plan: Plan, system: str, split: str, root: str | Path
                   ) -> Iterator[PlannedRead]:
    """The one door to a test split (module docstring): under the ledger's lock, refuse a
    read the plan does not allow (:func:`require_readable`) or that could not be entered
    (a ledger or a ``results/`` folder that cannot be written), then yield the
    :class:`PlannedRead` whose :meth:`~PlannedRead.record` enters it. The lock is held until the
    block ends, so a second read of the same system waits, then is refused."""
    root = Path(root)
    ledger = root / LEDGER
    try:
        ledger.parent.mkdir(parents=True, exist_ok=True)
        lock = open(ledger.with_suffix(".lock"), "a")  # noqa: SIM115 (held for the block)
    except OSError as error:
        raise bad_input("ledger", "a results/ folder where the ledger can be written",
                        f"{ledger.parent} ({error}); nothing was read") from None
    with lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        require_readable(plan, system, split, ledger)
        try:
            os.close(os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666))
        except OSError as error:
            raise bad_input("ledger", "a ledger file that can be appended to",
                            f"{ledger} ({error}); nothing was read") from None
        yield PlannedRead(plan, system, split, root)


def record_test_read(plan: Plan, system: str, split: str, scores: dict[str, Any],
                     hypotheses: Sequence[str], *, root: str | Path,
                     commit: str | None = None, record: str | None = None) -> Path:
    """Check and enter one read at once (:func:`open_test_read`, then
    :meth:`PlannedRead.record`), for a caller whose scores were computed already; returns
    the translations' path."""
    with open_test_read(plan, system, split, root) as read:
        return read.record(scores, hypotheses, commit=commit, record=record)
