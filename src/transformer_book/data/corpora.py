"""Translation corpora by name: the registry training reads its sentence pairs from.

Section 5.1 trains on sentence pairs; which pairs is a setting, ``[data] dataset`` of a run's
TOML file. :data:`DATASETS` maps each name to a :class:`Dataset`, and :func:`load_corpus` is
the one way to read one:

- ``"multi30k"``: the course's corpus (:mod:`~transformer_book.data.multi30k`), verified
  against its SHA-256 sums, found in ``data_dir``, ``$TRANSFORMER_BOOK_DATA`` or the cache;
- ``"parallel-text"``: your own corpus, a folder (``data_dir``) holding ``train.<src>`` and
  ``train.<tgt>``, ``valid.*`` and ``test.*``: plain UTF-8 text, one sentence per line, line
  ``i`` of one language the translation of line ``i`` of the other (the layout of Moses and
  fairseq's raw text).

Every dataset has the same three splits, :data:`CORPUS_SPLITS`: ``"train"``, ``"valid"`` (every
choice is made on it) and ``"test"``, each maybe under a name of its own (``split_names``).
A new dataset is one line::

    DATASETS.register("mine", Dataset(load=my_loader))  # my_loader(split, src, tgt, folder)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from transformer_book.data.multi30k import MULTI30K_LANGUAGES, load_multi30k
from transformer_book.util.registry import Registry
from transformer_book.util.validation import bad_input, require, require_one_of

__all__ = [
    "CORPUS_SPLITS",
    "DATASETS",
    "Dataset",
    "check_dataset",
    "corpus_split",
    "load_corpus",
    "load_parallel_text",
    "read_sentences",
]

#: The splits every dataset has: training, validation (model selection) and test.
CORPUS_SPLITS: tuple[str, ...] = ("train", "valid", "test")

#: A loader: ``(split, src, tgt, folder or None) -> [(source sentence, target sentence)]``.
Loader = Callable[[str, str, str, Path | None], list[tuple[str, str]]]

# Language codes name files (train.de): letters, digits, '-' and '_', no dots or slashes.
_LANGUAGE = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Dataset:
    """One entry of :data:`DATASETS`.

    Attributes:
        load: ``load(split, src, tgt, folder)`` -> the split's ``(source, target)`` pairs in
            order; ``split`` is one of :data:`CORPUS_SPLITS`, ``folder`` the ``data_dir`` asked for
            (a :class:`~pathlib.Path`) or ``None``.
        languages: the language codes it has; ``None``: any code (a file suffix).
        needs_dir: whether ``data_dir`` must name its folder (there is no default place).
        checksummed: whether its files are checked against fixed SHA-256 sums, so that
            its name and languages say what it holds. Training fingerprints the text of a
            dataset that is not, to refuse resuming on a changed corpus.
        split_names: the dataset's own names of :data:`CORPUS_SPLITS`, the names evaluation
            is asked for and records (Multi30k: ``val``, ``test_2016_flickr``); ``None``:
            the generic names.
    """

    load: Loader
    languages: tuple[str, ...] | None = None
    needs_dir: bool = False
    checksummed: bool = False
    split_names: dict[str, str] | None = None

    def own_split_names(self) -> dict[str, str]:
        """``{its own name: generic name}`` of its three splits."""
        names = self.split_names or {split: split for split in CORPUS_SPLITS}
        return {own: generic for generic, own in names.items()}


def read_sentences(path: Path) -> list[str]:
    """The lines of the UTF-8 text file ``path``, one sentence each, without their ``\\n``
    (or ``\\r\\n``); other whitespace is kept. A leading byte-order mark is dropped.

    Raises a ``BookError`` naming the file if it is missing, not UTF-8 (with the line of
    the first bad byte) or holds no sentence (empty, or only blank lines).
    """
    require(path.is_file(), str(path), "a text file, one sentence per line",
            "no such file" if not path.exists() else "not a file")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise bad_input(str(path), "UTF-8 text", f"byte {data[error.start]:#04x} on line {line}, "
                   "which is not UTF-8 (re-encode the file, e.g. iconv -t UTF-8)") from None
    lines = text.removeprefix("\ufeff").split("\n")
    if lines[-1] == "":  # the newline that ends the last line
        lines.pop()
    lines = [line.removesuffix("\r") for line in lines]
    require(any(line.strip() for line in lines), str(path), "at least one sentence",
            "an empty file" if not lines else f"{len(lines)} blank lines")
    return lines


def load_parallel_text(split: str, src: str, tgt: str,
                       folder: Path | None) -> list[tuple[str, str]]:
    """The pairs of ``folder/{split}.{src}`` and ``folder/{split}.{tgt}``, line by line.

    ``folder`` must be an existing folder. Both files are read by :func:`read_sentences`;
    they must have as many lines (a pair per line), else a ``BookError`` names both files
    and both counts.
    """
    require(folder is not None and folder.is_dir(), "data_dir",
            f"the folder holding {split}.{src} and {split}.{tgt}",
            f"{None if folder is None else str(folder)!r}, which is not a folder")
    assert folder is not None, "checked above"
    src_path, tgt_path = folder / f"{split}.{src}", folder / f"{split}.{tgt}"
    src_lines, tgt_lines = read_sentences(src_path), read_sentences(tgt_path)
    require(len(src_lines) == len(tgt_lines), f"{src_path} and {tgt_path}",
            "as many lines in each (line i of one is the translation of line i of the other)",
            f"{len(src_lines)} lines in {src_path.name} and {len(tgt_lines)} in "
            f"{tgt_path.name}")
    return list(zip(src_lines, tgt_lines, strict=True))


# Multi30k's own names of the three splits.
_MULTI30K_SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}


def _load_multi30k(split: str, src: str, tgt: str, folder: Path | None) -> list[tuple[str, str]]:
    return load_multi30k(_MULTI30K_SPLITS[split], src, tgt, folder)


def _check_entry(name: str, entry: Dataset) -> None:
    require(isinstance(entry, Dataset), f"dataset {name!r}", "a Dataset",
            type(entry).__name__)


#: Every dataset by name (the value of ``[data] dataset``), open to outside packages
#: (entry-point group ``transformer_book.datasets``, or a ``--plugin`` module calling
#: ``DATASETS.register``): its split names reach ``evaluate --split`` and the records.
DATASETS: Registry[Dataset] = Registry(
    "dataset", "transformer_book.datasets",
    {"multi30k": Dataset(load=_load_multi30k, languages=MULTI30K_LANGUAGES, checksummed=True,
                         split_names=_MULTI30K_SPLITS),
     "parallel-text": Dataset(load=load_parallel_text, needs_dir=True)},
    check=_check_entry)


def corpus_split(dataset: str, split: str) -> str:
    """The generic name (one of :data:`CORPUS_SPLITS`) of ``split``, a split's own name in
    ``dataset`` (Multi30k's ``val`` is ``"valid"``); a name it does not have is refused,
    listing the ones it has."""
    names = DATASETS.get(dataset, "dataset").own_split_names()
    return names[require_one_of(split, "split", names)]


def check_dataset(dataset: str, src: str, tgt: str, data_dir: str | os.PathLike[str] | None,
                  where: str = "") -> Dataset:
    """The :class:`Dataset` named ``dataset``, once ``src``, ``tgt`` and ``data_dir`` suit it;
    nothing is read. Errors name each argument after ``where`` (e.g. ``"tiny.toml [data]"``).

    ``dataset`` must be registered; ``src`` and ``tgt`` two different languages it has (any
    code made of letters, digits, ``-`` and ``_`` if it names none); ``data_dir`` a folder
    path, or ``None`` if the dataset does not need one. Whether the folder exists is left
    to the loader: a trained model's config is checked too, where its data may be gone.
    """
    prefix = f"{where} " if where else ""
    entry = DATASETS.get(dataset, f"{prefix}dataset")
    for name, language in (("src", src), ("tgt", tgt)):
        if entry.languages is not None:
            require_one_of(language, f"{prefix}{name}", entry.languages)
        else:
            require(isinstance(language, str) and _LANGUAGE.fullmatch(language) is not None,
                    f"{prefix}{name}", "a language code (letters, digits, '-', '_'), the "
                    "suffix of its files", repr(language))
    require(src != tgt, f"{prefix}tgt", f"a language different from src={src!r}", repr(tgt))
    require(data_dir is None or (isinstance(data_dir, (str, os.PathLike))
                                 and os.fspath(data_dir) != ""),
            f"{prefix}data_dir", "a folder path (a non-empty string) or no such key",
            repr(data_dir))
    require(data_dir is not None or not entry.needs_dir, f"{prefix}data_dir",
            f"the folder holding the {dataset!r} files (train.{src}, train.{tgt}, valid.*, "
            "test.*)", "no such key")
    return entry


def load_corpus(dataset: str, split: str, src: str = "de", tgt: str = "en",
                data_dir: str | os.PathLike[str] | None = None) -> list[tuple[str, str]]:
    """The ``(source, target)`` sentence pairs of one split of a registered dataset.

    Args:
        dataset: a name in :data:`DATASETS` (``"multi30k"``, ``"parallel-text"``, ...).
        split: one of :data:`CORPUS_SPLITS`: ``"train"``, ``"valid"`` or ``"test"``.
        src, tgt: the source and target languages (file suffixes for ``"parallel-text"``).
        data_dir: the dataset's folder (required by ``"parallel-text"``; for Multi30k where
            to look first, see :func:`~transformer_book.data.multi30k.multi30k_path`).

    Returns:
        The pairs in file order, each sentence one line without its newline.

    Raises a ``BookError`` naming what is wrong: an unknown dataset or split (listing the
    registered ones), languages it lacks, a missing folder or file, files of unequal
    lengths, an empty or non-UTF-8 file.
    """
    entry = check_dataset(dataset, src, tgt, data_dir)
    require_one_of(split, "split", CORPUS_SPLITS)
    return entry.load(split, src, tgt, None if data_dir is None else Path(data_dir))
