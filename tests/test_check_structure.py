"""scripts/check_structure.py: floor violations fail ``make lint``; sizes only warn."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_structure",
                                              ROOT / "scripts" / "check_structure.py")
check_structure = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_structure)


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A stand-in ``transformer_book`` under ``tmp_path``; write(module, source) adds one."""
    root = tmp_path / "transformer_book"
    monkeypatch.setattr(check_structure, "PACKAGE", root)

    def write(module: str, source: str) -> None:
        path = root.joinpath(*module.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")

    return write


def test_the_core_importing_a_course_layer_is_an_error(package, capsys):
    package("nn.attention", "from transformer_book.toy.aligner import Aligner\n")
    package("toy.aligner", "from transformer_book.nn.attention import x\n")
    assert check_structure.main() == 1
    out = capsys.readouterr().out
    assert "error: transformer_book.nn.attention: imports transformer_book.toy.aligner" in out


def test_long_functions_and_modules_only_warn(package, capsys):
    body = "".join(f"    x{i} = {i}\n" for i in range(check_structure.MAX_FUNCTION_LINES))
    package("nn.long", "def long():\n" + body + "\n" * check_structure.MAX_MODULE_LINES)
    assert check_structure.main() == 0
    out = capsys.readouterr().out
    assert "warning: transformer_book.nn.long:long: 61 lines" in out
    assert "warning: transformer_book.nn.long: " in out
    assert "0 error(s), 2 size warning(s)" in out


def test_the_real_package_has_no_error():
    assert check_structure.main() == 0
