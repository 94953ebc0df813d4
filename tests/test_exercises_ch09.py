"""Chapter 09's checkers accept correct answers and reject the classic mistakes."""

from __future__ import annotations

import torch

from transformer_book.course.exercises import run_check


def sublayer_connection(x, sublayer, norm, dropout, norm_first=False):
    if norm_first:
        return x + dropout(sublayer(norm(x)))
    return norm(x + dropout(sublayer(x)))


def count(config):
    d, f, v = config.d_model, config.d_ff, config.vocab_size
    attention = 4 * d * d + 4 * d
    ffn = 2 * d * f + f + d
    encoder = config.num_encoder_layers * (attention + ffn + 4 * d)
    decoder = config.num_decoder_layers * (2 * attention + ffn + 6 * d)
    embeddings = (1 if config.tie_embeddings else 3) * v * d + v * config.generator_bias
    positions = 2 * config.max_len * d if config.positional == "learned" else 0
    return encoder + decoder + 4 * d * config.final_norm + embeddings + positions


def test_09_1_passes_the_wrapper_and_fails_the_classic_mistakes():
    assert run_check("09.1", sublayer_connection).passed
    always_post = lambda x, s, n, d, norm_first=False: n(x + d(s(x)))  # noqa: E731
    assert run_check("09.1", always_post).status == "failed"
    dropout_everywhere = lambda x, s, n, d, norm_first=False: (  # noqa: E731
        d(x + s(n(x))) if norm_first else n(d(x + s(x))))
    assert run_check("09.1", dropout_everywhere).status == "failed"
    no_residual = lambda x, s, n, d, norm_first=False: (  # noqa: E731
        d(s(n(x))) if norm_first else n(d(s(x))))
    assert run_check("09.1", no_residual).status == "failed"


def test_09_1_leaves_the_global_rng_alone():
    state = torch.random.get_rng_state()
    run_check("09.1", sublayer_connection)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_09_1_not_attempted():
    def stub(x, sublayer, norm, dropout, norm_first=False):
        raise NotImplementedError("Exercise 09.1: write your solution here")

    assert run_check("09.1", stub).status == "not attempted"


def test_09_2_passes_the_closed_form_and_fails_forgotten_terms():
    assert run_check("09.2", count).passed
    result = run_check("09.2", lambda c: count(c) + c.vocab_size)  # a bias always
    assert result.status == "failed" and "off by" in result.detail
    always_norms = lambda c: count(c.replace(final_norm=True))  # noqa: E731
    assert run_check("09.2", always_norms).status == "failed"
    untied_always = lambda c: count(c.replace(tie_embeddings=False))  # noqa: E731
    assert run_check("09.2", untied_always).status == "failed"
    assert run_check("09.2", lambda c: "many").status == "failed"
