"""Chapter 09's checkers accept correct answers and reject the classic mistakes."""

from __future__ import annotations

import pytest
import torch

from transformer_book.course.exercises import run_check
from transformer_book.nn.attention import causal_mask


def make_layer(causal=True, dropout_first=False, residual_from_norm=False, memory_mask=True):
    """A decoder layer from its parts; each flag off (or on) is one classic bug."""

    def decoder_layer(y, memory, layer, mask):
        def sublayer(x, f, norm):
            if layer.norm_first:
                h = norm(x)
                return (h if residual_from_norm else x) + layer.dropout(f(h))
            if dropout_first:
                return layer.dropout(norm(x + f(x)))
            return norm(x + layer.dropout(f(x)))

        y = sublayer(y, lambda h: layer.self_attn(h, h, h, is_causal=causal)[0], layer.norm1)
        y = sublayer(y, lambda h: layer.cross_attn(h, memory, memory,
                                                   mask=mask if memory_mask else None)[0],
                     layer.norm2)
        return sublayer(y, layer.ffn, layer.norm3)

    return decoder_layer


def test_09_1_passes_the_fixed_layer():
    assert run_check("09.1", make_layer()).passed


def test_09_1_passes_an_explicit_causal_mask():
    def with_mask(y, memory, layer, mask):
        causal = causal_mask(y.shape[1])  # (T, T), True = may attend

        def sublayer(x, f, norm):
            if layer.norm_first:
                return x + layer.dropout(f(norm(x)))
            return norm(x + layer.dropout(f(x)))

        y = sublayer(y, lambda h: layer.self_attn(h, h, h, mask=causal)[0], layer.norm1)
        y = sublayer(y, lambda h: layer.cross_attn(h, memory, memory, mask=mask)[0], layer.norm2)
        return sublayer(y, layer.ffn, layer.norm3)

    assert run_check("09.1", with_mask).passed


@pytest.mark.parametrize(("bug", "symptom"), [
    (dict(causal=False), "a position sees its future"),
    (dict(memory_mask=False), "padded source positions"),
    (dict(dropout_first=True), "where the dropout goes"),
    (dict(residual_from_norm=True), "in pre-LN, which tensor"),
    (dict(causal=False, dropout_first=True, residual_from_norm=True), "sees its future"),
])
def test_09_1_fails_each_bug_and_names_its_symptom(bug, symptom):
    result = run_check("09.1", make_layer(**bug))
    assert result.status == "failed" and symptom in result.detail, result.detail


def test_09_1_refuses_the_package_layer_itself():
    result = run_check("09.1", lambda y, memory, layer, mask: layer(y, memory, mask)[0])
    assert result.status == "failed" and "not layer(...) itself" in result.detail
    assert run_check("09.1", lambda y, memory, layer, mask: None).status == "failed"


def test_09_1_leaves_the_global_rng_alone():
    state = torch.random.get_rng_state()
    run_check("09.1", make_layer())
    assert torch.equal(torch.random.get_rng_state(), state)


def test_09_1_not_attempted():
    def stub(y, memory, layer, memory_mask):
        raise NotImplementedError("Exercise 09.1: write your solution here")

    assert run_check("09.1", stub).status == "not attempted"


def count(config):
    d, f, v = config.d_model, config.d_ff, config.vocab_size
    attention = 4 * d * d + 4 * d
    ffn = 2 * d * f + f + d
    encoder = config.num_encoder_layers * (attention + ffn + 4 * d)
    decoder = config.num_decoder_layers * (2 * attention + ffn + 6 * d)
    embeddings = (1 if config.tie_embeddings else 3) * v * d + v * config.generator_bias
    positions = 2 * config.max_len * d if config.positional == "learned" else 0
    return encoder + decoder + 4 * d * config.final_norm + embeddings + positions


def test_09_2_passes_the_closed_form_and_fails_forgotten_terms():
    assert run_check("09.2", count).passed
    result = run_check("09.2", lambda c: count(c) + c.vocab_size)  # a bias always
    assert result.status == "failed" and "off by" in result.detail
    always_norms = lambda c: count(c.replace(final_norm=True))  # noqa: E731
    assert run_check("09.2", always_norms).status == "failed"
    untied_always = lambda c: count(c.replace(tie_embeddings=False))  # noqa: E731
    assert run_check("09.2", untied_always).status == "failed"
    assert run_check("09.2", lambda c: "many").status == "failed"


def test_09_2_refuses_an_answer_that_builds_the_model():
    from transformer_book.nn.transformer import Transformer, count_parameters

    def builds(config):
        with torch.device("meta"):
            return count_parameters(Transformer(config))

    result = run_check("09.2", builds)
    assert result.status == "failed" and "without building a module" in result.detail
    assert isinstance(torch.nn.Linear(2, 2), torch.nn.Module)  # building works again after
    assert run_check("09.2", count).passed
