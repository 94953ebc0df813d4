"""Checkers for chapter 12 (scaling up): the forward FLOP count and the MFU."""

from __future__ import annotations

import math

import torch

from transformer_book.analysis.compute import transformer_flops
from transformer_book.course.exercises.core import (
    ExerciseFailure,
    attempt,
    exercise,
    expect_equal,
    fresh_generator,
    random_int,
)
from transformer_book.nn.config import TransformerConfig


@exercise("12.1", "forward FLOPs of the Transformer")
def check_transformer_forward_flops(transformer_forward_flops) -> str:
    """``transformer_forward_flops(config, src_len, tgt_len)`` equals
    ``compute.transformer_flops(config, src_len, tgt_len).total`` for one sentence pair."""
    generator = fresh_generator()
    cases = [
        (TransformerConfig.preset("base", 37000), 25, 27, "the base model, 25 -> 27 tokens"),
        (TransformerConfig.preset("tiny", 100), 1, 1, "one source and one target token"),
        (TransformerConfig.preset("tiny", 100, num_encoder_layers=1, num_decoder_layers=3), 9, 4,
         "1 encoder layer and 3 decoder layers"),
    ]
    for _ in range(12):
        heads = random_int(1, 4, generator)
        config = TransformerConfig(
            vocab_size=random_int(10, 500, generator), d_model=heads * random_int(1, 16, generator),
            num_heads=heads, num_encoder_layers=random_int(1, 4, generator),
            num_decoder_layers=random_int(1, 4, generator), d_ff=random_int(1, 300, generator),
            tie_embeddings=bool(random_int(0, 1, generator)))
        s, t = random_int(1, 80, generator), random_int(1, 80, generator)
        cases.append((config, s, t, f"a random config (d_model={config.d_model}, "
                                    f"d_ff={config.d_ff}, N={config.num_encoder_layers}+"
                                    f"{config.num_decoder_layers}, V={config.vocab_size}), "
                                    f"S={s}, T={t}"))
    for config, s, t, what in cases:
        received = attempt(transformer_forward_flops, config, s, t, what=what)
        if isinstance(received, bool) or not isinstance(received, (int, float)):
            raise ExerciseFailure(f"for {what}, expected a number of FLOPs, received "
                                  f"{type(received).__name__}")
        breakdown = transformer_flops(config, s, t)
        if received != breakdown.total:
            hints = []
            if received == breakdown.total - breakdown.attention:
                hints.append("the attention products QKᵀ and weights·V are missing")
            if received == breakdown.total - breakdown.output_projection:
                hints.append("the output projection to the vocabulary is missing")
            if 2 * received == breakdown.total:
                hints.append("count 2 FLOPs per multiply-add")
            hint = f" ({'; '.join(hints)})" if hints else ""
            expect_equal(received, breakdown.total, what=what + hint)
    return (f"equal to compute.transformer_flops on {len(cases)} configurations: the base "
            "model, single tokens, unequal stacks and fresh random sizes")


@exercise("12.2", "model FLOPs utilisation")
def check_mfu(mfu) -> str:
    """``mfu(tokens_per_second, flops_per_token, peak_flops_per_second)`` is the fraction
    of the peak the model uses and refuses a throughput that is not positive."""
    generator = fresh_generator()
    for _ in range(20):
        tps = float(torch.empty(1).uniform_(1.0, 1e6, generator=generator))
        fpt = float(torch.empty(1).uniform_(1e6, 1e10, generator=generator))
        peak = float(torch.empty(1).uniform_(1e12, 1e16, generator=generator))
        what = "random throughput, FLOPs per token and peak"
        received = attempt(mfu, tps, fpt, peak, what=what)
        expected = tps * fpt / peak
        if not isinstance(received, (int, float)) or isinstance(received, bool) \
                or not math.isclose(received, expected, rel_tol=1e-9):
            raise ExerciseFailure(f"for {what} ({tps:.4g} tokens/s, {fpt:.4g} FLOPs/token, "
                                  f"peak {peak:.4g} FLOP/s), expected {expected:.6g}, "
                                  f"received {received!r}")
    # The paper's base run: 25,000 + 25,000 tokens per step, 100,000 steps in 12 hours, on
    # 8 P100s at 9.5 TFLOP/s each: 5e9 tokens / 43,200 s at 190 MFLOPs per token.
    received = attempt(mfu, 5e9 / 43200, 1.9e8, 8 * 9.5e12, what="the paper's base run")
    expected = 5e9 / 43200 * 1.9e8 / (8 * 9.5e12)
    if not isinstance(received, (int, float)) or not math.isclose(received, expected,
                                                                   rel_tol=1e-9):
        raise ExerciseFailure(f"for the paper's base run, expected {expected:.4f}, "
                              f"received {received!r}")
    for bad in (0.0, -100.0):
        try:
            mfu(bad, 1e9, 1e12)
        except NotImplementedError:
            raise
        except ValueError:
            continue
        except Exception as error:  # the learner's function may raise anything
            raise ExerciseFailure(f"for tokens_per_second={bad}, expected a ValueError, "
                                  f"received {type(error).__name__}: {error}") from None
        raise ExerciseFailure(f"for tokens_per_second={bad}, expected a ValueError (a "
                              "throughput must be positive), but nothing was raised")
    return ("matched tokens/s x FLOPs/token / peak on 21 inputs (fresh random ones and the "
            "paper's base run) and raised ValueError for zero and negative throughput")
