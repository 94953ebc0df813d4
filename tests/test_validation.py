"""util.validation: one error class (a ValueError) and the require_* family, each of which
accepts what it promises, refuses the rest and names the argument in its message."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_book.util.validation import (
    BookError,
    bad_input,
    is_integer,
    is_real,
    require,
    require_bool,
    require_finite_tensor,
    require_int,
    require_number,
    require_one_of,
    require_positive_int,
    require_positive_number,
    require_probability,
    require_tensor,
)


def test_book_error_is_a_value_error_with_the_standard_message():
    error = bad_input("beam_size", "an integer >= 1", 0)
    assert isinstance(error, BookError) and isinstance(error, ValueError)
    assert str(error) == "beam_size: expected an integer >= 1, received 0"
    require(True, "x", "anything", 1)
    assert is_integer(3) and not is_integer(True) and not is_integer(3.0)
    assert is_real(3) and is_real(2.5) and not is_real(False) and not is_real("1")
    with pytest.raises(BookError, match=r"^x: expected something, received 3$"):
        require(False, "x", "something", 3)


@pytest.mark.parametrize(
    ("check", "good", "returned"),
    [
        (lambda v: require_bool(v, "flag"), True, True),
        (lambda v: require_int(v, "n"), -3, -3),
        (lambda v: require_int(v, "n", minimum=0, maximum=4), 4, 4),
        (lambda v: require_positive_int(v, "n"), 1, 1),
        (lambda v: require_int(v, "n", minimum=0), 0, 0),
        (lambda v: require_number(v, "x"), 2, 2.0),
        (lambda v: require_number(v, "x", minimum=0.0, maximum=1.0), 1.0, 1.0),
        (lambda v: require_positive_number(v, "x"), 1e-9, 1e-9),
        (lambda v: require_positive_number(v, "x", allow_zero=True), 0, 0.0),
        (lambda v: require_probability(v, "p"), 0.0, 0.0),
        (lambda v: require_probability(v, "p"), 0.999, 0.999),
        (lambda v: require_one_of(v, "mode", ("a", "b")), "b", "b"),
    ],
)
def test_good_values_are_returned(check, good, returned):
    result = check(good)
    assert result == returned and type(result) is type(returned)


@pytest.mark.parametrize(
    ("check", "bad", "message"),
    [
        (lambda v: require_bool(v, "flag"), 1, "flag: expected True or False, received 1"),
        (lambda v: require_bool(v, "flag"), "yes", "flag: expected True or False, received 'yes'"),
        (lambda v: require_int(v, "n"), 1.0, "n: expected an integer, received 1.0"),
        (lambda v: require_int(v, "n"), True, "n: expected an integer, received True"),
        (lambda v: require_int(v, "n", minimum=0, maximum=4), 5,
         "n: expected an integer >= 0 and <= 4, received 5"),
        (lambda v: require_int(v, "n", maximum=4), 5, "n: expected an integer <= 4, received 5"),
        (lambda v: require_positive_int(v, "n"), 0, "n: expected an integer >= 1, received 0"),
        (lambda v: require_positive_int(v, "n"), "3", "n: expected an integer >= 1, received '3'"),
        (lambda v: require_number(v, "x"), "0.1", "x: expected a finite number, received '0.1'"),
        (lambda v: require_number(v, "x"), math.nan, "x: expected a finite number, received nan"),
        (lambda v: require_number(v, "x"), False, "x: expected a finite number, received False"),
        (lambda v: require_number(v, "x", minimum=0), -1,
         "x: expected a finite number >= 0, received -1"),
        (lambda v: require_number(v, "x", minimum=0, maximum=1), 1.5,
         "x: expected a finite number >= 0 and <= 1, received 1.5"),
        (lambda v: require_positive_number(v, "x"), 0,
         "x: expected a finite number > 0, received 0"),
        (lambda v: require_positive_number(v, "x"), math.inf,
         "x: expected a finite number > 0, received inf"),
        (lambda v: require_positive_number(v, "x", allow_zero=True), -0.5,
         "x: expected a finite number >= 0, received -0.5"),
        (lambda v: require_probability(v, "dropout"), 1.0,
         r"dropout: expected a number in [0, 1), received 1.0"),
        (lambda v: require_probability(v, "dropout"), "0.1",
         r"dropout: expected a number in [0, 1), received '0.1'"),
        (lambda v: require_probability(v, "dropout"), math.nan,
         r"dropout: expected a number in [0, 1), received nan"),
        (lambda v: require_one_of(v, "mode", ("b", "a")), "c",
         "mode: expected one of ['b', 'a'], received 'c'"),
        (lambda v: require_one_of(v, "mode", {"b", "a"}), "c",
         "mode: expected one of ['a', 'b'], received 'c'"),
        (lambda v: require_one_of(v, "mode", {"a"}), ["a"],
         "mode: expected one of ['a'], received ['a']"),
    ],
)
def test_bad_values_are_refused_naming_the_argument(check, bad, message):
    with pytest.raises(BookError) as refused:
        check(bad)
    assert str(refused.value) == message


def test_tensor_checks_read_metadata_and_values():
    ids = torch.zeros(2, 3, dtype=torch.long)
    assert require_tensor(ids, "ids", ndim=2, dtype=torch.long) is ids
    assert require_tensor(ids, "ids", ndim=(1, 2)) is ids
    with pytest.raises(BookError, match=r"^ids: expected a torch.Tensor, received list$"):
        require_tensor([1, 2], "ids")
    with pytest.raises(BookError, match=r"^ids: expected a 3-D tensor, received shape \(2, 3\)$"):
        require_tensor(ids, "ids", ndim=3)
    with pytest.raises(BookError, match=r"^ids: expected dtype torch.int32, received torch.int64"):
        require_tensor(ids, "ids", dtype=torch.int32)
    with pytest.raises(BookError, match=r"^ids: expected a floating-point tensor"):
        require_tensor(ids, "ids", floating=True)
    x = torch.tensor([1.0, 2.0])
    assert require_finite_tensor(x, "x") is x
    assert require_finite_tensor(ids, "ids") is ids, "integer tensors are always finite"
    with pytest.raises(BookError, match=r"^x: expected finite values, received NaN or infinity$"):
        require_finite_tensor(torch.tensor([1.0, math.inf]), "x")
