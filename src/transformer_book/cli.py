"""The ``transformer-book`` command line.

Subcommands::

    transformer-book --version
    transformer-book env                          # versions, device, threads
    transformer-book assignments --out DIR [--nbgrader]  # student notebooks / nbgrader sources
    transformer-book grade SUBMISSIONS --out DIR [--marks marks.csv]  # grades.csv, feedback
    transformer-book train --config configs/small.toml [--out runs/small] [--results results]
                           [--max-steps N] [--max-minutes M] [--no-resume] [--device D]
                           [--bleu-sentences 200] [--val-sentences K] [--quiet]
    transformer-book translate "Ein Mann fährt Fahrrad." --checkpoint runs/small [--beam 4]
                               [--alpha 0.6] [--stop exact|k_finished]
    transformer-book translate - --checkpoint runs/small [--quiet] < sentences.txt
    transformer-book translate "Ein Hund." --checkpoint runs/small --sample
                               [--temperature 1.0] [--top-p 1.0] [--seed 0]
    transformer-book evaluate --checkpoint runs/small [--split val|test_2016_flickr]
                              [--select last|best-val|best-val-bleu] [--average 5]
                              [--beam 4] [--limit K] [--results results]
                              [--stop exact|k_finished] [--max-tokens 4096] [--quiet]
    transformer-book export --checkpoint runs/small --out DIR [--average 5]   # Hugging Face

Errors in what was asked (bad config, empty input, corrupted checkpoints, a command line
argparse cannot read) raise :class:`~transformer_book.util.validation.BookError`: one line,
``transformer-book <cmd>: error: ...``, exit code 2. The paths a command writes, its
``--device`` and decoding arguments are checked before any work starts. Every command
computes on the best device the machine has (cuda, mps, cpu) unless ``--device`` names
one. A training loss that becomes NaN/inf exits with code 1 and a diagnostic. Any other
exception is a bug and shows its traceback.

Each subcommand is a function ``_cmd_<name>(args) -> int`` registered in
:func:`build_parser`. The package is imported inside them (this module alone may do so), so
``transformer-book --help`` answers before torch has loaded.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from transformer_book.interop.cli_args import add_export_parser


class _UsageError(Exception):
    """A command line argparse cannot read: shown as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` (and, through ``add_subparsers``, its subcommands' parsers)
    whose complaints are one line, like a refusal, instead of the usage text."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def _check_device(device: str | None) -> None:
    """``--device`` names a device this machine has: cpu, mps, cuda or cuda:N."""
    from transformer_book.util.env import require_device

    if device is not None:
        require_device(device, "--device")


def _cmd_env(args: argparse.Namespace) -> int:
    from transformer_book.util.env import format_report

    print(format_report())
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from transformer_book.run.config import load_run_config
    from transformer_book.train.loop import train
    from transformer_book.train.step import NonFiniteLossError
    from transformer_book.util.files import require_writable

    config = load_run_config(args.config)
    if args.max_steps is not None:
        config.train.max_steps = args.max_steps
    if args.max_minutes is not None:
        config.train.max_minutes = args.max_minutes
    if args.seed is not None:
        config.train.seed = args.seed
    config.validate(f"{args.config} (with command-line overrides)")
    name = Path(args.config).stem
    require_writable(args.out or Path("runs") / name, "--out")
    require_writable(args.results, "--results")
    _check_device(args.device)
    try:
        result = train(
            config,
            args.out or Path("runs") / name,
            resume=not args.no_resume,
            progress=not args.quiet,
            device=args.device,
            results_dir=args.results,
            name=name,
            command=args.argv,
            bleu_sentences=args.bleu_sentences,
            val_sentences=args.val_sentences,
            fast=args.fast,
        )
    except NonFiniteLossError as error:  # the run diverged: not a mistake in what was asked
        print(f"transformer-book train: error: {error}", file=sys.stderr)
        return 1
    if result.rank == 0:  # under torchrun only rank 0 reports
        print(f"final checkpoint: {result.final_checkpoint}")
    return 0


def _read_sentences(sentences: list[str]) -> list[str]:
    """The positional sentences, with ``-`` replaced by the lines of standard input. A blank
    line of stdin stays, as ``""`` (it becomes a blank output line); a blank argument is
    refused, and so is input with no sentence at all."""
    from transformer_book.util.validation import bad_input, require

    out: list[str] = []
    for i, item in enumerate(sentences):
        if item == "-":
            try:
                out.extend(line if line.strip() else "" for line in sys.stdin.read().splitlines())
            except UnicodeDecodeError as error:
                raise bad_input("stdin", "UTF-8 text, one sentence per line", f"{error}") from None
        else:
            require(item.strip() != "", f"sentences[{i}]", "a non-empty sentence", repr(item))
            out.append(item)
    require(any(out), "sentences", "at least one sentence (or - with lines on stdin)",
            "only blank lines" if out else "none")
    return out


def _check_decoding_arguments(args: argparse.Namespace) -> None:
    """The decoding options as given, before anything is loaded: ``--strategy`` names a
    registered strategy, each setting given is a value the strategies that have it accept
    (and, with ``--strategy``, one of its settings), and ``--max-tokens``, ``--cache`` and
    ``--device``. Once the model is loaded: the beam's upper bound (the vocabulary size),
    and, without ``--strategy``, that each setting is one of the run config's strategy's."""
    from transformer_book.inference.generate import CACHES
    from transformer_book.run.config import DECODING_STRATEGIES, strategy_fields
    from transformer_book.util.validation import require_one_of, require_positive_int

    given = _given_settings(args)
    if args.strategy is not None:
        DECODING_STRATEGIES.get(args.strategy, "--strategy")
        _make_strategy(args.strategy, given)
    else:  # the run config's strategy, known once it is read: each value checked by the
        for name in DECODING_STRATEGIES.names():  # strategies that have its setting
            fields = strategy_fields(name)
            own = {key: value for key, value in given.items() if key in fields}
            if own:
                _make_strategy(name, own)
    require_positive_int(args.max_tokens, "--max-tokens")
    require_one_of(args.cache, "--cache", CACHES)
    _check_device(args.device)


def _given_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The strategy settings given on the command line (``--beam 2`` -> ``beam_size``)."""
    return {key[len(_SETTING):]: value for key, value in vars(args).items()
            if key.startswith(_SETTING) and value is not None}


def _option(setting: str) -> str:
    """A setting's command-line option: ``top_p`` -> ``--top-p`` (``beam_size``: ``--beam``,
    its older name, with ``--beam-size`` beside it)."""
    return _SHORT.get(setting, "--" + setting.replace("_", "-"))


def _make_strategy(name: str, settings: dict[str, Any]) -> Any:
    """The strategy ``name`` made with ``settings`` (and the defaults of the rest);
    refusals name the option (``--temperature``), not the setting."""
    from transformer_book.run.config import make_strategy, strategy_fields
    from transformer_book.util.validation import BookError, bad_input

    fields = strategy_fields(name, "--strategy")
    for key, value in settings.items():
        if key not in fields:
            raise bad_input(_option(key), f"a setting of strategy {name!r} "
                            f"({', '.join(_option(f) for f in fields) or 'none'})", repr(value))
    try:
        return make_strategy(name, settings, "--strategy")
    except BookError as error:  # "temperature: expected ..." -> "--temperature: expected ..."
        message = str(error)
        for key in settings:
            if message.startswith(f"{key}:"):
                raise BookError(_option(key) + message[len(key):]) from None
        raise


def _cmd_translate(args: argparse.Namespace) -> int:
    from transformer_book.inference.trained import load_trained
    from transformer_book.inference.translate import translate

    _check_decoding_arguments(args)
    sentences = _read_sentences(args.sentences)
    trained = load_trained(args.checkpoint, device=_device(args))
    strategy = _chosen_strategy(args, trained)
    lines = iter(translate(trained, [s for s in sentences if s], strategy,
                           max_tokens=args.max_tokens, cache=args.cache,
                           progress=not args.quiet,
                           # indices among the non-blank:
                           argument="sentences" if all(sentences) else "non-blank sentences"))
    for sentence in sentences:  # a line break in a translation would shift every line after
        print(" ".join(next(lines).splitlines()) if sentence else "")
    return 0


def _chosen_strategy(args: argparse.Namespace, trained: Any) -> Any:
    """The strategy ``--strategy`` names (default: the run config's ``[decode]
    strategy``), made with the settings given and the config's others."""
    dec = trained.run_config.decode
    name = dec.strategy if args.strategy is None else args.strategy
    return _make_strategy(name, {**dec.settings_for(name), **_given_settings(args)})


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from transformer_book.inference.evaluation import evaluate, write_evaluation
    from transformer_book.inference.trained import load_trained
    from transformer_book.util.files import atomic_write_text
    from transformer_book.util.timing import Stopwatch

    _check_evaluate_arguments(args)
    plan = None if args.plan is None else _check_plan(args)
    # A test read: under the ledger's lock from the check to its line, which is written
    # before any score is shown (or the read is refused, not spent).
    door = contextlib.nullcontext() if plan is None else _open_test_read(plan, args)
    with door as read, Stopwatch() as wall:
        trained = load_trained(args.checkpoint, device=_device(args), average=args.average,
                               select=args.select)
        print(_describe_selection(trained.selection))
        started = None if plan is None else _check_planned_before(plan, trained)
        evaluation = evaluate(trained, split=args.split, limit=args.limit,
                              strategy=_chosen_strategy(args, trained), cache=args.cache,
                              max_tokens=args.max_tokens, progress=not args.quiet)
        path = None
        if args.results is not None:
            path = write_evaluation(args.results, evaluation, trained, args.argv, wall.seconds)
        if read is not None:
            kept = _record_test_read(read, args, evaluation, path, started)
        print(evaluation)
        if args.hypotheses is not None:
            atomic_write_text(args.hypotheses, "\n".join(evaluation.hypotheses) + "\n")
    if path is not None:
        print(f"record: {path}")
    if read is not None:
        print(f"test read entered in the ledger; translations: {kept}")
    return 0


def _check_plan(args: argparse.Namespace) -> Any:
    """The plan a test read needs: committed, naming this split and system, not yet read
    for them (:mod:`transformer_book.run.plans`), and decoding as it says: its beam and α
    (taken from it when not given) and one of its checkpoint rules. Checked before anything
    is loaded."""
    from transformer_book.run.plans import (
        LEDGER,
        checkpoint_rule,
        load_plan,
        repository_root,
        require_readable,
    )
    from transformer_book.util.validation import require

    plan = load_plan(args.plan)
    require_readable(plan, args.system, args.split, repository_root(args.plan) / LEDGER)
    require(args.strategy in (None, "beam"), "--strategy",
            f"beam search, the search plan {plan.name!r} names (or none)", args.strategy)
    args.strategy = "beam"
    for option, key, setting in (("--beam", "beam", "beam_size"), ("--alpha", "alpha", "alpha")):
        wanted = plan.fields[key]
        given = getattr(args, _SETTING + setting)
        require(given is None or given == wanted, option,
                f"plan {plan.name!r}'s {key} ({wanted}), or none", given)
        setattr(args, _SETTING + setting, wanted)
    rules = {name: checkpoint_rule(name) for name in plan.fields["checkpoint_rules"]}
    chosen = [name for name, rule in rules.items()
              if (rule["select"], rule["average"]) == (args.select, args.average)]
    require(bool(chosen), "--select/--average", f"one of plan {plan.name!r}'s checkpoint "
            f"rules {list(rules)} ({', '.join(_rule_options(r) for r in rules.values())})",
            _rule_options({"select": args.select, "average": args.average}))
    args.rule = chosen[0]
    return plan


def _rule_options(rule: dict[str, Any]) -> str:
    """A checkpoint rule as the options that ask for it."""
    average = f" --average {rule['average']}" if rule["average"] else ""
    return f"--select {rule['select']}{average}"


def _open_test_read(plan: Any, args: argparse.Namespace) -> Any:
    """:func:`transformer_book.run.plans.open_test_read` for this command's plan and system."""
    from transformer_book.run.plans import open_test_read, repository_root

    return open_test_read(plan, args.system, args.split, repository_root(args.plan))


def _check_planned_before(plan: Any, trained: Any) -> dict[str, Any]:
    """Refuse a plan that did not precede the run, by its start manifest; returns it."""
    from transformer_book.run.plans import require_plan_precedes

    run_dir = Path(trained.checkpoints[0]).parent
    return require_plan_precedes(plan, run_dir, f"the run {run_dir}")


def _record_test_read(read: Any, args: argparse.Namespace, evaluation: Any,
                      record: Path | None, started: dict[str, Any] | None) -> Path:
    """This read's ledger line and translations (before any score is shown); when they
    cannot be written, the evaluation's record goes too and the read is refused."""
    from transformer_book.util.records import git_commit

    root, scores = read.root, evaluation.scores
    return read.record(
        {"bleu": scores.bleu, "signature": scores.bleu_signature, "chrf": scores.chrf,
         "ter": scores.ter, "bleu_95": evaluation.bleu_interval},
        evaluation.hypotheses, commit=git_commit(root).get("commit"),
        record=None if record is None else os.path.relpath(record, root),
        scored=[] if record is None else [record], rule=args.rule,
        beam=getattr(args, _SETTING + "beam_size"), alpha=getattr(args, _SETTING + "alpha"),
        run_start={key: (started or {}).get(key) for key in ("started_utc", "commit")})


def _cmd_export(args: argparse.Namespace) -> int:
    from transformer_book.interop.hf_export import export_command

    return export_command(args)


def _describe_selection(selection: dict[str, Any]) -> str:
    """One line: which checkpoint was chosen, by which rule, and which were averaged."""
    scores = [f"{label} {selection[key]:.4g}" for key, label in
              (("chosen_val_loss", "val loss"), ("chosen_val_bleu", "greedy val BLEU"))
              if selection[key] is not None]
    return (f"checkpoint: step {selection['chosen_step']} by --select {selection['select']}"
            f"{' (' + ', '.join(scores) + ')' if scores else ''}, "
            f"weights of steps {selection['averaged_steps']}")


def _check_evaluate_arguments(args: argparse.Namespace) -> None:
    """What ``evaluate`` is asked, checked before the checkpoint or the data is loaded."""
    from transformer_book.data.corpora import DATASETS
    from transformer_book.util.files import require_writable
    from transformer_book.util.validation import require, require_one_of, require_positive_int

    if args.limit is not None:
        require_positive_int(args.limit, "--limit")
    if args.average is not None:
        require_positive_int(args.average, "--average")
    names = {own: generic for _, entry in DATASETS.items()
             for own, generic in entry.own_split_names().items()}
    require_one_of(args.split, "--split", sorted(names))
    if names[args.split] == "test":
        require(args.plan is not None, "--plan", "a plan committed before training "
                "(results/plans/*.toml) to read a test split", "none")
        require(args.system is not None, "--system", "the plan's name of the system read",
                "none")
        require(args.limit is None, "--limit", "none with a test split (a plan reads the "
                "whole split once; --limit is for val)", args.limit)
    else:
        require(args.plan is None, "--plan", "only with a test split", args.split)
    _check_decoding_arguments(args)
    if args.results is not None:
        require_writable(args.results, "--results")
    if args.hypotheses is not None:
        require_writable(args.hypotheses, "--hypotheses", folder=False)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command. The decoding strategies' options (one per setting of
    each registered strategy, :func:`_add_strategy_arguments`) are generated for
    ``translate`` and ``evaluate``; when ``argv`` names another command they are left out,
    so that ``transformer-book --help`` answers before torch has loaded."""
    from transformer_book import __version__  # the package root is light: no torch yet

    parser = _Parser(prog="transformer-book",
                     description="The Transformer, step by step: tools for the course. "
                     "Every command computes on the best device this machine has (cuda, "
                     "then mps, then cpu) unless --device names one.")
    parser.add_argument("--version", action="version", version=f"transformer-book {__version__}")
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                        help="import MODULE first, which registers decoding strategies, "
                        "datasets or presets of its own (repeatable)")
    commands = parser.add_subparsers(dest="command", required=True)
    strategies = argv is None or any(word in ("translate", "evaluate") for word in argv)
    env = commands.add_parser("env", help="print versions, device and threads")
    env.set_defaults(run=_cmd_env)
    from transformer_book.course.course_cli import add_course_parsers  # assignments, grade

    add_course_parsers(commands)
    _add_train_parser(commands)
    _add_translate_parser(commands, strategies)
    _add_evaluate_parser(commands, strategies)
    add_export_parser(commands, _cmd_export)
    return parser


def _add_train_parser(commands: Any) -> None:
    train = commands.add_parser("train",
                                help="train a translation model (Section 5) from a TOML config")
    add = train.add_argument
    add("--config", required=True, type=Path,
        help="run config, e.g. configs/small.toml (Multi30k) or a copy of "
             "configs/parallel-text.example.toml (your own sentence pairs)")
    add("--out", type=Path, default=None,
        help="run folder for tokenizer and checkpoints (default runs/<config>)")
    _add_results_argument(train)
    add("--max-steps", type=int, default=None, help="override [train] max_steps")
    add("--max-minutes", type=float, default=None, help="override [train] max_minutes")
    add("--seed", type=int, default=None, help="override [train] seed")
    add("--no-resume", action="store_true",
        help="start from scratch (refused if --out holds checkpoints)")
    add("--device", default=None, help=DEVICE_HELP)
    add("--bleu-sentences", type=int, default=200,
        help="val sentences decoded for greedy BLEU at each evaluation (default 200; 0 = no BLEU)")
    add("--val-sentences", type=int, default=None,
        help="val pairs for the validation loss (default: all)")
    add("--fast", action="store_true",
        help="the fast paths (cheaper dropout masks, generator and loss in one pass); one "
             "process; a resumed run must say the same")
    add("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(run=_cmd_train)


def _add_translate_parser(commands: Any, strategies: bool) -> None:
    translate = commands.add_parser("translate", help="translate sentences with a checkpoint")
    translate.add_argument("sentences", nargs="+",
                           help="source sentences; - reads one sentence per line from stdin "
                           "and prints one line per input line (a blank line stays blank)")
    _add_decoding_arguments(translate, strategies)
    translate.set_defaults(run=_cmd_translate)


def _add_evaluate_parser(commands: Any, strategies: bool) -> None:
    from transformer_book.inference.trained import SELECTIONS

    evaluate = commands.add_parser(
        "evaluate", help="BLEU, chrF++ and TER of a checkpoint on a Multi30k split (Section 6.1)")
    add = evaluate.add_argument
    add("--split", default="val",
        help="the split by its dataset's name: val (default) or test_2016_flickr for Multi30k, "
        "valid or test for parallel text, or a split of any registered dataset; a test split "
        "is read only with --plan, once per system, after every choice has been made on val")
    add("--plan", type=Path, default=None,
        help="with a test split: the plan (results/plans/NAME.toml) committed before the run "
        "was trained; the read joins results/test_reads.jsonl and its translations are kept "
        "in results/translations/")
    add("--system", default=None, help="with --plan: which of the plan's systems this is")
    _add_decoding_arguments(evaluate, strategies)
    add("--select", choices=SELECTIONS, default="last",
        help="which checkpoint: last (default; --checkpoint, or a run folder's newest), "
        "best-val (lowest validation loss) or best-val-bleu (highest greedy validation BLEU) "
        "among the kept checkpoints of the run folder --checkpoint names, by the evaluations "
        "recorded during training")
    add("--average", type=int, default=None,
        help="average N checkpoints: with --select last the N ending at --checkpoint (a run "
        "folder: its newest), otherwise the N kept ones nearest in step to the chosen one")
    add("--limit", type=int, default=None, help="only the first K sentences")
    _add_results_argument(evaluate)
    add("--hypotheses", type=Path, default=None,
        help="also write the translations to this file (in an existing folder), one per line")
    evaluate.set_defaults(run=_cmd_evaluate)


def _add_decoding_arguments(parser: argparse.ArgumentParser, strategies: bool) -> None:
    """``--checkpoint``, the strategy and its settings, ``--cache``, ``--device``,
    ``--max-tokens`` and ``--quiet``: what ``translate`` and ``evaluate`` share."""
    add = parser.add_argument
    add("--checkpoint", required=True, type=Path,
        help="a checkpoint folder or a run folder (its newest checkpoint)")
    if strategies:
        _add_strategy_arguments(parser)
    add("--cache", default="growing",
        help="the decoder's key/value cache: growing (default), static, compiled (the static "
        "cache with torch.compile's step: tens of seconds to compile) or none; the same "
        "translations, at different speeds")
    add("--device", default=None, help=DEVICE_HELP)
    add("--max-tokens", type=int, default=4096,
        help="source tokens decoded together at most (default 4096; lower it to use less "
        "memory)")
    add("--quiet", action="store_true",
        help="no progress bar (by default one on stderr counts the sentences decoded)")


# The prefix of the settings' destinations in the parsed arguments (setting_beam_size).
_SETTING = "setting_"
# Settings whose option has a name of its own (the generated one answers too).
_SHORT = {"beam_size": "--beam"}


def _add_strategy_arguments(parser: argparse.ArgumentParser) -> None:
    """``--strategy`` and one option per setting of every registered strategy (read from
    the registry: a strategy registered by a plugin gets its options too), each valid with
    the strategies that have it; ``--sample`` is ``--strategy sample``."""
    from transformer_book.run.config import DECODING_STRATEGIES, strategy_fields, strategy_help

    names = DECODING_STRATEGIES.names()
    add = parser.add_argument
    add("--strategy", default=None,
        help=f"the decoding strategy: {', '.join(names)} (default: the run config's [decode] "
        "strategy, beam search with its beam size and alpha)")
    add("--sample", action="store_const", const="sample", dest="strategy",
        help="the same as --strategy sample")
    owners: dict[str, list[tuple[str, Any]]] = {}
    for name in names:
        for key, default in strategy_fields(name).items():
            owners.setdefault(key, []).append((name, default))
    for key, entries in owners.items():
        defaults = {type(default) for _, default in entries}
        kind = defaults.pop() if len(defaults) == 1 and defaults <= {int, float, str} else str
        said = "; ".join(f"with --strategy {name}: {strategy_help(name, key)} (default "
                         f"{default})" for name, default in entries)
        generated = "--" + key.replace("_", "-")
        add(*dict.fromkeys((_option(key), generated)), dest=_SETTING + key, type=kind,
            default=None, metavar=key.upper(), help=said)


DEVICE_HELP = "cpu, cuda, cuda:N or mps (default: the best this machine has, cuda, mps, cpu)"
def _device(args: argparse.Namespace) -> Any:
    """``--device``, or the best device this machine has: the one rule of every command."""
    from transformer_book.util.env import get_device

    return get_device(args.device) if args.device is not None else get_device()


def _add_results_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", type=Path, default=Path("results"),
                        help="folder for the JSON record (default results)")


def _load_plugins(argv: Sequence[str]) -> None:
    """Import the modules ``--plugin`` names (before the parser is built: their strategies
    become options of it)."""
    from transformer_book.util.registry import load_plugin

    for i, word in enumerate(argv):
        if word == "--plugin" and i + 1 < len(argv):
            load_plugin(argv[i + 1])
        elif word.startswith("--plugin="):
            load_plugin(word.split("=", 1)[1])


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``transformer-book`` console script.

    A :class:`~transformer_book.util.validation.BookError` (a refusal of what was asked)
    prints one line and returns 2; any other exception propagates with its traceback.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    from transformer_book.util.validation import BookError

    try:
        _load_plugins(argv)
        parser = build_parser(argv)
        args = parser.parse_args(argv)
    except _UsageError as error:
        print(error, file=sys.stderr)
        return 2
    except BookError as error:  # a plugin that cannot be imported
        print(f"transformer-book: error: {error}", file=sys.stderr)
        return 2
    args.argv = ["transformer-book", *argv]
    try:
        return int(args.run(args))
    except BookError as error:
        message = " ".join(str(error).split())  # one line, whatever the message holds
        print(f"transformer-book {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
