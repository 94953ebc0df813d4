"""The package's front door: the public names of every floor, loaded on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import transformer_book
from transformer_book import inference, nn, util


def test_public_names_resolve_to_their_floor() -> None:
    assert transformer_book.Transformer is nn.Transformer
    assert transformer_book.BookError is util.BookError
    assert transformer_book.greedy_decode is inference.greedy_decode
    for name in transformer_book.__all__:
        assert getattr(transformer_book, name) is not None, name


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        transformer_book.not_a_name


def test_importing_the_package_loads_nothing_heavy() -> None:
    code = "import sys, transformer_book; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
