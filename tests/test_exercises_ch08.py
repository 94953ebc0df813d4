"""Chapter 08's checkers accept correct answers and reject the classic mistakes."""

from __future__ import annotations

import torch

from transformer_book.course.exercises import run_check


def sinusoidal_encoding(length, d_model, base=10000.0):
    pos = torch.arange(length, dtype=torch.float64)[:, None]  # (L, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d/2,)
    angle = pos / base ** (two_i / d_model)  # (L, d/2)
    pe = torch.zeros(length, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe


def offset_rotation(k, d_model, base=10000.0):
    omega = 1.0 / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    c, s = torch.cos(omega * k), torch.sin(omega * k)
    m[0::2, 0::2] = torch.diag(c)
    m[0::2, 1::2] = torch.diag(s)
    m[1::2, 0::2] = torch.diag(-s)
    m[1::2, 1::2] = torch.diag(c)
    return m


def test_08_1_passes_float64_and_float32_and_rejects_common_mistakes():
    assert run_check("08.1", sinusoidal_encoding).passed
    as_float32 = lambda n, d, base=10000.0: sinusoidal_encoding(n, d, base).float()  # noqa: E731
    assert run_check("08.1", as_float32).passed
    ignores_base = lambda n, d, base=10000.0: sinusoidal_encoding(n, d)  # noqa: E731
    assert run_check("08.1", ignores_base).status == "failed"

    def swapped(n, d, base=10000.0):
        pe = sinusoidal_encoding(n, d, base)
        return pe[:, torch.arange(d).view(-1, 2).flip(1).reshape(-1)]  # cos first

    assert run_check("08.1", swapped).status == "failed"

    def halves(n, d, base=10000.0):  # sin block then cos block (another common layout)
        pe = sinusoidal_encoding(n, d, base)
        return torch.cat([pe[:, 0::2], pe[:, 1::2]], dim=1)

    assert run_check("08.1", halves).status == "failed"
    result = run_check("08.1", lambda n, d, base=10000.0: sinusoidal_encoding(n, d, base).T)
    # by its shape, or by its values when the draw is square (length = d_model: 6 and 6
    # failed one full run)
    assert result.status == "failed" and ("shape" in result.detail or
                                          "expected" in result.detail), result.detail


def test_08_1_not_attempted():
    def stub(length, d_model, base=10000.0):
        raise NotImplementedError("Exercise 08.1: write your solution here")

    assert run_check("08.1", stub).status == "not attempted"


def test_08_2_passes_and_rejects_transpose_and_inverse():
    assert run_check("08.2", offset_rotation).passed
    transposed = lambda k, d, base=10000.0: offset_rotation(k, d, base).T  # noqa: E731
    assert run_check("08.2", transposed).status == "failed"
    inverse = lambda k, d, base=10000.0: offset_rotation(-k, d, base)  # noqa: E731
    assert run_check("08.2", inverse).status == "failed"
    result = run_check("08.2", lambda k, d, base=10000.0: offset_rotation(k, d, base).long())
    assert result.status == "failed" and "floating-point" in result.detail


def test_08_2_not_attempted():
    def stub(k, d_model, base=10000.0):
        raise NotImplementedError("Exercise 08.2: write your solution here")

    assert run_check("08.2", stub).status == "not attempted"


def test_08_1_refuses_the_package_table_and_a_loop():
    from transformer_book.nn.positional import sinusoidal_encoding as package_table

    result = run_check("08.1", lambda n, d, base=10000.0: package_table(n, d, base))
    assert result.status == "failed" and "sinusoids itself" in result.detail

    def loop(n, d, base=10000.0):
        pe = torch.zeros(n, d, dtype=torch.float64)
        for pos in range(n):
            pe[pos] = sinusoidal_encoding(pos + 1, d, base)[pos]
        return pe

    result = run_check("08.1", loop)
    assert result.status == "failed" and "loops over positions" in result.detail


def test_08_2_accepts_float32_and_refuses_the_package_matrix():
    as_float32 = lambda k, d, base=10000.0: offset_rotation(k, d, base).float()  # noqa: E731
    assert run_check("08.2", as_float32).passed
    from transformer_book.nn.positional import relative_offset_matrix

    result = run_check("08.2", lambda k, d, base=10000.0: relative_offset_matrix(k, d, base))
    assert result.status == "failed" and "sinusoids itself" in result.detail
