"""util.folders: a folder written as one step (checkpoints and exports share it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from transformer_book.util import folders
from transformer_book.util.folders import replacing, tidy


def _write(target, text, marker=True):
    with replacing(target, "DONE") as temp:
        assert temp.parent == target.parent and temp.name.startswith(f".{target.name}.tmp-")
        (temp / "data.txt").write_text(text)
        if marker:
            (temp / "DONE").write_text("")


def _contents(folder):
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("exchange", [True, False], ids=["exchanged", "two-renames"])
def test_a_folder_is_replaced_whole(tmp_path, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(folders, "_exchange", lambda first, second: False)
    target = tmp_path / "out"
    _write(target, "old")
    _write(target, "new")
    assert (target / "data.txt").read_text() == "new" and _contents(tmp_path) == ["out"]


def test_an_error_or_a_missing_marker_leaves_the_old_folder(tmp_path):
    target = tmp_path / "out"
    _write(target, "old")
    with pytest.raises(KeyError), replacing(target, "DONE") as temp:
        (temp / "data.txt").write_text("half")
        raise KeyError("cut short")
    with pytest.raises(AssertionError, match=r"\.out\.tmp-.*: the folder was written without "
                                             r"its DONE"):
        _write(target, "unmarked", marker=False)
    assert (target / "data.txt").read_text() == "old" and _contents(tmp_path) == ["out"]


def test_tidy_takes_the_leftovers_of_the_folders_it_names(tmp_path, capsys):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a process no longer running
    mine, other = (tmp_path / f".{name}.tmp-{folders._HOST}-{child.pid}" for name in ("a", "b"))
    mine.mkdir()
    other.mkdir()
    (mine / "DONE").write_text("")
    assert tidy(tmp_path, "DONE", "a") == [mine]
    assert _contents(tmp_path) == [other.name, "a"]  # a complete copy of a missing folder
    assert f"{tmp_path / 'a'}: recovered from {mine.name} (the new copy;" in capsys.readouterr().err
    assert tidy(tmp_path, "DONE", "*") == [other] and _contents(tmp_path) == ["a"]
    assert f"removed {other.name}, left by an interrupted write" in capsys.readouterr().err


def test_files_written_private_become_readable_as_new_files_are(tmp_path):
    """safetensors' save_file (Hugging Face's save_pretrained) makes 0600 files."""
    previous = os.umask(0o022)
    try:
        with replacing(tmp_path / "out", "DONE") as temp:
            (temp / "sub").mkdir()
            for name in ("weights", "sub/more", "DONE"):
                (temp / name).write_text("")
                (temp / name).chmod(0o600)
    finally:
        os.umask(previous)
    modes = {p.relative_to(tmp_path).as_posix(): p.stat().st_mode & 0o777
             for p in (tmp_path / "out").rglob("*")}
    assert modes == {"out/weights": 0o644, "out/sub": 0o755, "out/sub/more": 0o644,
                     "out/DONE": 0o644}
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o755
