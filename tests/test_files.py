"""util.files: a write replaces the whole file or leaves the old one, with the modes the
umask allows (0644 files and 0755 folders under umask 022, not mkstemp's 0600/0700)."""

from __future__ import annotations

import hashlib
import json
import math
import os

import pytest

from transformer_book.util.files import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    atomic_writer,
    new_directory,
    sha256_file,
)
from transformer_book.util.validation import BookError


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _mode(path) -> int:
    return path.stat().st_mode & 0o777


def test_writes_replace_the_file_whole(tmp_path):
    path = tmp_path / "a.txt"
    assert atomic_write_text(path, "first ü\n") == path
    assert path.read_text(encoding="utf-8") == "first ü\n"
    atomic_write_bytes(path, b"second")
    assert path.read_bytes() == b"second"
    atomic_write_json(path, {"b": 1, "a": [1.5, None]}, sort_keys=True)
    assert path.read_text() == '{\n  "a": [\n    1.5,\n    null\n  ],\n  "b": 1\n}\n'
    assert json.loads(path.read_text()) == {"a": [1.5, None], "b": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"], "no temporary file left"


def test_a_failing_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "data.bin"
    atomic_write_bytes(path, b"old")
    with pytest.raises(RuntimeError, match="half-way"), atomic_writer(path) as out:
        out.write(b"new, but not all of it")
        raise RuntimeError("half-way")
    assert path.read_bytes() == b"old"
    with pytest.raises(BookError, match=r"data: expected JSON values \(no NaN or infinity\)"):
        atomic_write_json(path, {"loss": math.nan})
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin"]


def test_files_and_folders_get_the_modes_the_umask_allows(tmp_path, umask_022):
    for write, name in ((lambda p: atomic_write_text(p, "x"), "text"),
                        (lambda p: atomic_write_bytes(p, b"x"), "bytes"),
                        (lambda p: atomic_write_json(p, [1]), "json")):
        write(tmp_path / name)
        assert _mode(tmp_path / name) == 0o644, name
    folder = new_directory(tmp_path, ".run-")
    assert folder.parent == tmp_path and folder.name.startswith(".run-")
    assert _mode(folder) == 0o755 and list(folder.iterdir()) == []
    assert new_directory(tmp_path, ".run-") != folder


def test_a_stricter_umask_is_respected(tmp_path):
    previous = os.umask(0o077)
    try:
        atomic_write_text(tmp_path / "private", "x")
        folder = new_directory(tmp_path, "d-")
    finally:
        os.umask(previous)
    assert _mode(tmp_path / "private") == 0o600 and _mode(folder) == 0o700


def test_sha256_file_reads_the_whole_file(tmp_path):
    data = os.urandom((1 << 20) + 17)  # more than one block
    atomic_write_bytes(tmp_path / "blob", data)
    assert sha256_file(tmp_path / "blob") == hashlib.sha256(data).hexdigest()
