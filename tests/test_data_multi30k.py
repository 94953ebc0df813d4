"""Multi30k loading: lookup order, SHA-256 checks, atomic cached downloads; never the network."""

from __future__ import annotations

import gzip
import hashlib
import io
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from transformer_book.data.multi30k import (
    MULTI30K_SHA256,
    MULTI30K_SIZES,
    MULTI30K_URL,
    DatasetUnavailableError,
    load_multi30k,
    multi30k_cache_dir,
    multi30k_path,
)
from transformer_book.util.validation import BookError


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No env folder, a private cache, and no network at all."""
    monkeypatch.delenv("TRANSFORMER_BOOK_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))

    def offline(url: str, timeout: float) -> None:
        raise urllib.error.URLError(f"network disabled in tests: {url}")

    monkeypatch.setattr(urllib.request, "urlopen", offline)


def _serve(monkeypatch: pytest.MonkeyPatch, data: bytes) -> list[str]:
    """Answer every download with ``data``; returns the list of requested URLs."""
    urls: list[str] = []

    def fake_urlopen(url: str, timeout: float) -> io.BytesIO:
        urls.append(url)
        return io.BytesIO(data)

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    return urls


def _copy_from(source_dir: Path, name: str, dest_dir: Path) -> Path:
    dest_dir.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(source_dir / name, dest_dir / name))


def _tamper(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


# test_2017_flickr is read only under a plan, once per system: not even loaded here (its
# SHA-256, checked against the shared sums below, pins its content).
@pytest.mark.parametrize("split", [s for s in MULTI30K_SIZES if s != "test_2017_flickr"])
def test_split_sizes_and_pairs(multi30k_dir: Path, split: str) -> None:
    pairs = load_multi30k(split, data_dir=multi30k_dir)
    assert len(pairs) == MULTI30K_SIZES[split]
    assert all(isinstance(s, str) and isinstance(t, str) for s, t in pairs)
    assert not any(s.endswith("\n") or t.endswith("\n") for s, t in pairs)


def test_val_first_pair_and_direction(multi30k_dir: Path) -> None:
    de_en = load_multi30k("val", "de", "en", data_dir=multi30k_dir)
    en_fr = load_multi30k("val", src="en", tgt="fr", data_dir=multi30k_dir)
    assert de_en[0][0].startswith("Eine Gruppe von Männern")
    assert en_fr[0][0] == de_en[0][1]
    with gzip.open(multi30k_dir / "val.en.gz", "rt", encoding="utf-8") as handle:
        assert de_en[0][1] == handle.readline().rstrip("\n")


def test_embedded_sums_match_shared_sums_file(multi30k_dir: Path) -> None:
    sums_file = multi30k_dir / "SHA256SUMS"
    if not sums_file.exists():
        pytest.skip("no SHA256SUMS next to the data")
    listed = dict(reversed(line.split()) for line in sums_file.read_text().splitlines() if line)
    assert listed == MULTI30K_SHA256


def test_lookup_order_env_then_cache(multi30k_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                     tmp_path: Path) -> None:
    monkeypatch.setenv("TRANSFORMER_BOOK_DATA", str(multi30k_dir))
    assert multi30k_path("val", "de") == multi30k_dir / "val.de.gz"
    # An explicit data_dir wins over the environment.
    local = tmp_path / "local"
    copied = _copy_from(multi30k_dir, "val.de.gz", local)
    assert multi30k_path("val", "de", data_dir=local) == copied
    # A data_dir without the file falls through to the environment.
    assert multi30k_path("val", "en", data_dir=local) == multi30k_dir / "val.en.gz"
    # Without data_dir or environment: the user cache.
    monkeypatch.delenv("TRANSFORMER_BOOK_DATA")
    cached = _copy_from(multi30k_dir, "val.fr.gz", multi30k_cache_dir())
    assert multi30k_cache_dir() == tmp_path / "xdg" / "transformer_book" / "multi30k"
    assert multi30k_path("val", "fr") == cached


def test_cache_dir_defaults_to_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert multi30k_cache_dir() == tmp_path / ".cache" / "transformer_book" / "multi30k"


def test_tampered_data_dir_file_is_refused_not_deleted(multi30k_dir: Path, tmp_path: Path) -> None:
    path = _copy_from(multi30k_dir, "val.de.gz", tmp_path / "local")
    _tamper(path)
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(BookError, match=rf"val\.de\.gz.*{MULTI30K_SHA256['val.de.gz']}.*{actual}"):
        load_multi30k("val", data_dir=path.parent)
    assert path.exists()


def test_a_verified_file_is_checked_again_once_rewritten(multi30k_dir: Path,
                                                        tmp_path: Path) -> None:
    path = _copy_from(multi30k_dir, "val.de.gz", tmp_path / "local")
    assert multi30k_path("val", "de", data_dir=path.parent) == path
    assert multi30k_path("val", "de", data_dir=path.parent) == path
    _tamper(path)  # a rewrite changes mtime/size: hashed again, and refused
    with pytest.raises(BookError, match="SHA-256"):
        multi30k_path("val", "de", data_dir=path.parent)


def test_corrupt_cached_download_is_deleted(multi30k_dir: Path) -> None:
    cached = _copy_from(multi30k_dir, "val.de.gz", multi30k_cache_dir())
    _tamper(cached)
    with pytest.raises(BookError, match="deleted"):
        multi30k_path("val", "de")
    assert not cached.exists()


def test_download_is_verified_then_written_atomically(multi30k_dir: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    urls = _serve(monkeypatch, (multi30k_dir / "val.en.gz").read_bytes())
    path = multi30k_path("val", "en")
    assert urls == [MULTI30K_URL.format(split="val", lang="en")]
    assert path == multi30k_cache_dir() / "val.en.gz"
    assert path.read_bytes() == (multi30k_dir / "val.en.gz").read_bytes()
    assert sorted(p.name for p in path.parent.iterdir()) == ["val.en.gz"]
    multi30k_path("val", "en")
    assert len(urls) == 1  # second call uses the cache


def test_tampered_download_is_discarded(
    multi30k_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = bytearray((multi30k_dir / "val.en.gz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    _serve(monkeypatch, bytes(data))
    with pytest.raises(BookError, match=r"val\.en\.gz.*expected SHA-256 .*received .*discarded"):
        multi30k_path("val", "en")
    cache = multi30k_cache_dir()
    assert not cache.exists() or list(cache.iterdir()) == []


def test_offline_without_copy_says_what_to_do() -> None:
    url = MULTI30K_URL.format(split="val", lang="de")
    with pytest.raises(DatasetUnavailableError, match=rf"{url}.*data_dir=.*TRANSFORMER_BOOK_DATA"):
        load_multi30k("val")
    assert issubclass(DatasetUnavailableError, BookError)
    cache = multi30k_cache_dir()
    assert not cache.exists() or list(cache.iterdir()) == []


def test_unequal_line_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for lang, text in (("de", "a\nb\n"), ("en", "a\n")):
        path = tmp_path / f"val.{lang}.gz"
        path.write_bytes(gzip.compress(text.encode()))
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        monkeypatch.setitem(MULTI30K_SHA256, path.name, digest)
    with pytest.raises(BookError, match="Multi30k val: expected as many en lines as de lines"):
        load_multi30k("val", data_dir=tmp_path)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"split": "dev"}, r"split: expected one of \['train', 'val', 'test_2016_flickr', "
                           r"'test_2017_flickr'\]"),
        ({"split": "val", "src": "cs"}, r"src: expected one of \['de', 'en', 'fr'\], received 'cs"),
        ({"split": "val", "tgt": "xx"}, r"tgt: expected one of \['de', 'en', 'fr'\]"),
        ({"split": "val", "src": "en", "tgt": "en"}, "tgt: expected a language different"),
    ],
)
def test_bad_arguments(kwargs: dict[str, str], match: str) -> None:
    with pytest.raises(BookError, match=match):
        load_multi30k(**kwargs)


def test_multi30k_path_bad_language() -> None:
    with pytest.raises(BookError, match=r"lang: expected one of \['de', 'en', 'fr'\]"):
        multi30k_path("val", "es")


@pytest.mark.parametrize("call", [multi30k_path, load_multi30k])
def test_a_data_dir_that_is_not_a_folder_is_refused_not_skipped(call, multi30k_dir: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    monkeypatch.setenv("TRANSFORMER_BOOK_DATA", str(multi30k_dir))  # would have been used
    args = ("val", "de") if call is multi30k_path else ("val",)
    missing = tmp_path / "multi30K"
    with pytest.raises(BookError, match=rf"data_dir: expected an existing folder .*received "
                                        rf"'{missing}', which is not a folder"):
        call(*args, data_dir=missing)
    (tmp_path / "file").write_text("")
    with pytest.raises(BookError, match=r"data_dir: expected an existing folder"):
        call(*args, data_dir=tmp_path / "file")
    for bad in (5, ""):
        with pytest.raises(BookError, match=rf"data_dir: expected a folder path .*received "
                                            rf"{bad!r}"):
            call(*args, data_dir=bad)
    empty = tmp_path / "empty"
    empty.mkdir()  # a folder without the file: the lookup goes on
    assert call(*args, data_dir=empty)
