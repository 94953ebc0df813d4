"""Multi30k: the small translation corpus the course trains on.

The paper trains on WMT 2014 English-German (4.5 million sentence pairs, Section 5.1
"Training Data and Batching"); a laptop cannot, so the course uses Multi30k (Elliott et
al., 2016): 29,000 image captions in German, English and French, with 1,014 validation
and 1,000 test pairs. The same pipeline -- byte-pair encoding, a shared vocabulary,
length-bucketed batches -- then runs in minutes.

Where the files come from, in order:

1. the ``data_dir`` argument,
2. the folder named by ``$TRANSFORMER_BOOK_DATA``,
3. the user cache ``~/.cache/transformer_book/multi30k`` (``$XDG_CACHE_HOME`` respected),
4. a download from the Multi30k repository into that cache.

Every file, found or downloaded, must match the SHA-256 sum in :data:`MULTI30K_SHA256`
before it is read; a corrupt file is never used.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import urllib.error
import urllib.request
from pathlib import Path

from transformer_book.util.files import atomic_writer, sha256_file
from transformer_book.util.validation import BookError, bad_input, require, require_one_of

__all__ = [
    "MULTI30K_LANGUAGES",
    "MULTI30K_SHA256",
    "MULTI30K_SIZES",
    "MULTI30K_SPLITS",
    "MULTI30K_URL",
    "DatasetUnavailableError",
    "load_multi30k",
    "multi30k_cache_dir",
    "multi30k_path",
]

# test_2017_flickr is held out: read only under a plan committed before its systems trained
MULTI30K_SPLITS: tuple[str, ...] = ("train", "val", "test_2016_flickr", "test_2017_flickr")
MULTI30K_LANGUAGES: tuple[str, ...] = ("de", "en", "fr")
MULTI30K_SIZES: dict[str, int] = {"train": 29000, "val": 1014, "test_2016_flickr": 1000,
                                  "test_2017_flickr": 1000}
MULTI30K_URL = (
    "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{split}.{lang}.gz"
)
ENV_VAR = "TRANSFORMER_BOOK_DATA"

#: SHA-256 of every ``{split}.{lang}.gz`` file; a file that does not match is refused.
MULTI30K_SHA256: dict[str, str] = {
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_flickr.fr.gz": "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
}

# Files whose hash already matched: (resolved path, mtime_ns, size). A rewritten file
# changes its mtime or size and is hashed again.
_VERIFIED: set[tuple[str, int, int]] = set()


class DatasetUnavailableError(BookError):
    """Multi30k is neither on disk nor downloadable (e.g. no network)."""


def multi30k_cache_dir() -> Path:
    """The download cache: ``$XDG_CACHE_HOME/transformer_book/multi30k`` (default ``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "transformer_book" / "multi30k"


def _check_split_lang(split: str, lang: str, argument: str = "lang") -> None:
    require_one_of(split, "split", MULTI30K_SPLITS)
    require_one_of(lang, argument, MULTI30K_LANGUAGES)


def _check_data_dir(data_dir: str | os.PathLike[str] | None) -> None:
    """``None`` or an existing folder: a folder named on purpose is never skipped silently."""
    if data_dir is None:
        return
    require(isinstance(data_dir, (str, os.PathLike)) and os.fspath(data_dir) != "", "data_dir",
            "a folder path (a string or a Path) or None", repr(data_dir))
    require(Path(data_dir).is_dir(), "data_dir", "an existing folder holding the Multi30k "
            f"files (or None to use ${ENV_VAR} or the cache)", f"{os.fspath(data_dir)!r}, "
            "which is not a folder")


def _verify(path: Path, expected: str) -> str | None:
    """Return ``None`` if ``path`` hashes to ``expected`` (cached per path+mtime), else its hash."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key in _VERIFIED:
        return None
    actual = sha256_file(path)
    if actual != expected:
        return actual
    _VERIFIED.add(key)
    return None


def _mismatch(file: str | Path, expected: str, actual: str, note: str) -> BookError:
    return bad_input(str(file), f"SHA-256 {expected}", f"{actual}; {note}")


def _fetch(split: str, lang: str, cache: Path) -> Path:
    """Download one file into ``cache`` through :func:`atomic_writer`: the bytes are hashed
    as they arrive, and a download that fails or does not match is never renamed into place."""
    name = f"{split}.{lang}.gz"
    url = MULTI30K_URL.format(split=split, lang=lang)
    hint = f"set data_dir= or ${ENV_VAR} to a folder holding {name}"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DatasetUnavailableError(
            f"Multi30k {name}: cannot create the cache {cache} ({error}); {hint}"
        ) from error
    final, expected = cache / name, MULTI30K_SHA256[name]
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=60) as response, atomic_writer(final) as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
            if digest.hexdigest() != expected:  # raised inside: the temporary file goes
                raise _mismatch(url, expected, digest.hexdigest(), "the download was discarded")
    except (urllib.error.URLError, OSError) as error:
        raise DatasetUnavailableError(
            f"Multi30k {name} is not on disk and downloading {url} failed ({error}); {hint}"
        ) from error
    _verify(final, expected)  # remember the verified file
    return final


def multi30k_path(split: str, lang: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return the verified local path of ``{split}.{lang}.gz``, downloading it if needed.

    Looks in ``data_dir``, then ``$TRANSFORMER_BOOK_DATA``, then the user cache
    (:func:`multi30k_cache_dir`); if none holds the file, downloads it from
    :data:`MULTI30K_URL` into the cache. Every file must match :data:`MULTI30K_SHA256`.

    Raises:
        BookError: unknown ``split`` or ``lang``; a ``data_dir`` that is not a folder (never
            skipped silently; a folder without the file is); a file whose SHA-256 does not
            match (a corrupt cached download is deleted, a file in ``data_dir`` or
            ``$TRANSFORMER_BOOK_DATA`` is only refused).
        DatasetUnavailableError: no local copy and the download failed.
    """
    _check_split_lang(split, lang)
    _check_data_dir(data_dir)
    name = f"{split}.{lang}.gz"
    expected = MULTI30K_SHA256[name]
    env_dir = os.environ.get(ENV_VAR)
    for folder in (data_dir, env_dir or None):
        if folder is None:
            continue
        candidate = Path(folder) / name
        if candidate.is_file():
            actual = _verify(candidate, expected)
            if actual is not None:
                raise _mismatch(candidate, expected, actual, "the file was refused")
            return candidate
    cache = multi30k_cache_dir()
    cached = cache / name
    if cached.is_file():
        actual = _verify(cached, expected)
        if actual is None:
            return cached
        cached.unlink(missing_ok=True)
        raise _mismatch(
            cached, expected, actual, "the corrupt cached copy was deleted; call again to download"
        )
    return _fetch(split, lang, cache)


def _read_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as handle:
        return [line.removesuffix("\n") for line in handle]


def load_multi30k(
    split: str,
    src: str = "de",
    tgt: str = "en",
    data_dir: str | os.PathLike[str] | None = None,
) -> list[tuple[str, str]]:
    """Load one Multi30k split as ``(source, target)`` sentence pairs.

    Section 5.1 of the paper trains on sentence pairs ("WMT 2014 English-German dataset
    consisting of about 4.5 million sentence pairs"); Multi30k is the course's small
    stand-in. Each sentence is one line of ``{split}.{lang}.gz`` without its newline
    (other whitespace is kept exactly).

    Args:
        split: ``"train"`` (29,000 pairs), ``"val"`` (1,014), ``"test_2016_flickr"`` (1,000)
            or ``"test_2017_flickr"`` (1,000, held out for a plan's reads).
        src: source language, one of ``"de"``, ``"en"``, ``"fr"``.
        tgt: target language, one of the same, different from ``src``.
        data_dir: a folder with the ``.gz`` files; see :func:`multi30k_path` for the lookup.

    Returns:
        A list of ``(source_sentence, target_sentence)`` string pairs, in file order.
    """
    _check_split_lang(split, src, "src")
    _check_split_lang(split, tgt, "tgt")
    _check_data_dir(data_dir)
    require(tgt != src, "tgt", f"a language different from src={src!r}", repr(tgt))
    src_lines = _read_lines(multi30k_path(split, src, data_dir))
    tgt_lines = _read_lines(multi30k_path(split, tgt, data_dir))
    if len(src_lines) != len(tgt_lines):
        raise bad_input(
            f"Multi30k {split}",
            f"as many {tgt} lines as {src} lines ({len(src_lines)})",
            f"{len(tgt_lines)} {tgt} lines",
        )
    return list(zip(src_lines, tgt_lines, strict=True))
