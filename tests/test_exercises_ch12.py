"""Chapter 12's checkers accept correct answers and reject the classic mistakes."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from transformer_book.analysis.compute import peak_flops, training_flops, transformer_flops
from transformer_book.course.exercises import run_check
from transformer_book.course.exercises.ch12 import frozen_encoder_reference
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer


def frozen_step(config, src_len, tgt_len, batch):
    """The answer, written from the chapter's rule: one activation-gradient product and one
    weight-gradient product per forward product."""
    f = transformer_flops(config, src_len, tgt_len, batch)
    encoder_weights = f.encoder_projections + f.encoder_feed_forward
    if config.tie_embeddings:
        return 3 * f.total - encoder_weights
    memory_kv = config.num_decoder_layers * 2 * (2 * batch * src_len * config.d_model**2)
    return 3 * f.total - 2 * (encoder_weights + f.encoder_attention) - memory_kv


@pytest.mark.parametrize("tie", [True, False])
def test_the_reference_is_what_flop_counter_mode_counts(tie):
    config = TransformerConfig(vocab_size=30, d_model=8, num_heads=2, num_encoder_layers=2,
                               num_decoder_layers=1, d_ff=12, dropout=0.0, tie_embeddings=tie)
    model = Transformer(config)
    model.encoder.requires_grad_(False)
    if not tie:
        model.src_embed.requires_grad_(False)
    counter = FlopCounterMode(display=False)
    with sdpa_kernel([SDPBackend.MATH]), counter:
        model(torch.randint(4, 30, (2, 5)), torch.randint(4, 30, (2, 3))).sum().backward()
    assert counter.get_total_flops() == frozen_encoder_reference(config, 5, 3, 2)
    assert frozen_encoder_reference(config, 5, 3, 2) < 3 * transformer_flops(config, 5, 3, 2).total


def test_12_1_accepts_the_count_and_names_the_classic_mistakes():
    assert run_check("12.1", frozen_step).passed
    nothing_frozen = lambda c, s, t, b: 3 * transformer_flops(c, s, t, b).total  # noqa: E731
    result = run_check("12.1", nothing_frozen)
    assert result.status == "failed" and "∂L/∂W is skipped" in result.detail
    always_tied = lambda c, s, t, b: frozen_step(c.replace(tie_embeddings=True), s, t, b)  # noqa: E731
    result = run_check("12.1", always_tied)
    assert result.status == "failed" and "nothing below the memory is trained" in result.detail
    never_tied = lambda c, s, t, b: frozen_step(c.replace(tie_embeddings=False), s, t, b)  # noqa: E731
    result = run_check("12.1", never_tied)
    assert result.status == "failed" and "travel back through the frozen" in result.detail

    def memory_kv_forgotten(c, s, t, b):
        extra = 0 if c.tie_embeddings else c.num_decoder_layers * 4 * b * s * c.d_model**2
        return frozen_step(c, s, t, b) + extra

    result = run_check("12.1", memory_kv_forgotten)
    assert result.status == "failed" and "keys and values" in result.detail
    assert run_check("12.1", lambda c, s, t, b: "many").status == "failed"


def test_12_1_not_attempted_and_rng_alone():
    def stub(config, src_len, tgt_len, batch):
        raise NotImplementedError("Exercise 12.1: write your solution here")

    state = torch.random.get_rng_state()
    assert run_check("12.1", stub).status == "not attempted"
    run_check("12.1", frozen_step)
    assert torch.equal(torch.random.get_rng_state(), state)


def gpus(config, tokens_per_side, seq_len, device_name, precision, mfu, floor_seconds):
    step = training_flops(config, seq_len, seq_len, batch=tokens_per_side // seq_len)
    per_gpu = peak_flops(device_name, precision) * mfu
    return max(1, math.ceil(step / (per_gpu * floor_seconds)))


def test_12_2_accepts_the_answer_and_names_the_classic_mistakes():
    assert run_check("12.2", gpus).passed

    def forward_only(config, tokens, n, chip, precision, mfu, floor):
        step = training_flops(config, n, n, batch=tokens // n) / 3
        return max(1, math.ceil(step / (peak_flops(chip, precision) * mfu * floor)))

    result = run_check("12.2", forward_only)
    assert result.status == "failed" and "forward and backward" in result.detail

    def at_peak(config, tokens, n, chip, precision, mfu, floor):
        return gpus(config, tokens, n, chip, precision, 1.0, floor)

    result = run_check("12.2", at_peak)
    assert result.status == "failed" and "mfu x its peak" in result.detail

    def rounded_down(*args):
        return max(1, gpus(*args) - 1)

    assert "above the floor" in run_check("12.2", rounded_down).detail
    assert run_check("12.2", lambda *args: "eight").status == "failed"


def test_12_2_not_attempted():
    def stub(config, tokens_per_side, seq_len, device_name, precision, mfu, floor_seconds):
        raise NotImplementedError("Exercise 12.2: write your solution here")

    assert run_check("12.2", stub).status == "not attempted"
