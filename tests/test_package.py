"""The package's front door: the few names a learner types, each loaded on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import transformer_book
from transformer_book import inference, nn, util

FLOORS = {"util", "data", "nn", "run", "inference", "train", "baselines", "toy", "analysis",
          "interop", "course", "cli"}


def test_the_front_door_is_small() -> None:
    assert len(transformer_book.__all__) <= 30, transformer_book.__all__
    assert len(set(transformer_book.__all__)) == len(transformer_book.__all__), "a name twice"


def test_public_names_resolve_to_their_floor() -> None:
    assert transformer_book.Transformer is nn.Transformer
    assert transformer_book.BookError is util.BookError
    assert transformer_book.greedy_decode is inference.greedy_decode
    for name in transformer_book.__all__:
        value = getattr(transformer_book, name)
        assert value is not None, name
        if name != "__version__":
            assert value.__module__.startswith("transformer_book."), (name, value.__module__)


def test_no_root_name_shadows_a_floor() -> None:
    """``transformer_book.train`` must stay the floor: a root function of that name would
    replace the module for ``import transformer_book.train as t``."""
    assert not FLOORS & set(transformer_book.__all__), FLOORS & set(transformer_book.__all__)
    import transformer_book.train as floor

    assert floor.__name__ == "transformer_book.train", floor


def test_internals_are_imported_from_their_floor() -> None:
    with pytest.raises(AttributeError, match="no attribute 'FLOAT32_MAX'"):
        transformer_book.FLOAT32_MAX


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        transformer_book.not_a_name


def test_importing_the_package_loads_nothing_heavy() -> None:
    code = "import sys, transformer_book; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
