"""Checkers for chapter 12 (scaling up): a training step with a frozen encoder, counted, and
how many GPUs a step can use before its fixed cost sets the time."""

from __future__ import annotations

import math

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from transformer_book.analysis.compute import peak_flops, training_flops, transformer_flops
from transformer_book.course.exercises.core import (
    ExerciseFailure,
    attempt,
    exercise,
    fresh_generator,
    random_int,
)
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer


def _frozen_parts(config: TransformerConfig, src_len: int, tgt_len: int, batch: int) -> dict:
    """The terms of a frozen-encoder step: the full step, the products with encoder weights,
    the encoder's attention products and the decoder's K/V projections of the memory."""
    f = transformer_flops(config, src_len, tgt_len, batch)
    return {
        "full": 3 * f.total,
        "encoder weights": f.encoder_projections + f.encoder_feed_forward,
        "encoder attention": f.encoder_attention,
        "memory keys and values": config.num_decoder_layers * 2 * (
            2 * batch * src_len * config.d_model * config.d_model),
    }


def frozen_encoder_reference(config: TransformerConfig, src_len: int, tgt_len: int,
                             batch: int) -> int:
    """Forward + backward FLOPs with ``model.encoder`` frozen (and ``model.src_embed`` when
    untied): a frozen weight needs no weight-gradient product; with tied embeddings the
    gradient still flows back through the encoder to E, with untied ones nothing below the
    memory is trained, so the encoder needs no backward and the memory's K/V projections
    only their weight gradients."""
    p = _frozen_parts(config, src_len, tgt_len, batch)
    if config.tie_embeddings:
        return p["full"] - p["encoder weights"]
    return (p["full"] - 2 * (p["encoder weights"] + p["encoder attention"])
            - p["memory keys and values"])


def _measured(config: TransformerConfig, src_len: int, tgt_len: int, batch: int,
              generator: torch.Generator) -> int:
    """FlopCounterMode's count of one step of the package's model, encoder frozen."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        model = Transformer(config)
    for p in model.encoder.parameters():
        p.requires_grad_(False)
    if not config.tie_embeddings:
        model.src_embed.weight.requires_grad_(False)
    src = torch.randint(4, config.vocab_size, (batch, src_len), generator=generator)
    tgt = torch.randint(4, config.vocab_size, (batch, tgt_len), generator=generator)
    counter = FlopCounterMode(display=False)
    with sdpa_kernel([SDPBackend.MATH]), counter:  # attention as matmuls the counter sees
        model(src, tgt).sum().backward()
    return counter.get_total_flops()


def _hints(received, config: TransformerConfig, s: int, t: int, b: int) -> list[str]:
    p = _frozen_parts(config, s, t, b)
    tied = frozen_encoder_reference(config.replace(tie_embeddings=True), s, t, b)
    untied = frozen_encoder_reference(config.replace(tie_embeddings=False), s, t, b)
    expected = tied if config.tie_embeddings else untied
    hints = []
    if received == p["full"]:
        hints.append("that is a step with nothing frozen: a frozen weight needs no gradient, "
                     "so the product that computes ∂L/∂W is skipped")
    elif config.tie_embeddings and received == untied:
        hints.append("with tie_embeddings=True the source embedding is the decoder's matrix "
                     "and is still trained: the gradient must travel back through the frozen "
                     "encoder to reach it")
    elif not config.tie_embeddings and received == tied:
        hints.append("with separate embeddings nothing below the memory is trained, so no "
                     "gradient has to travel back through the encoder at all")
    elif received == expected + p["memory keys and values"]:
        hints.append("the decoder's cross-attention projects the memory to keys and values; "
                     "the memory needs no gradient now")
    elif received == expected - p["encoder attention"]:
        hints.append("QKᵀ and weights·V multiply two activations that both need gradients: "
                     "their backward still costs twice their forward")
    return hints


def _random_small_config(generator: torch.Generator) -> TransformerConfig:
    heads = random_int(1, 3, generator)
    return TransformerConfig(
        vocab_size=random_int(10, 60, generator), d_model=2 * heads * random_int(1, 3, generator),
        num_heads=heads, num_encoder_layers=random_int(1, 3, generator),
        num_decoder_layers=random_int(1, 3, generator), d_ff=random_int(1, 24, generator),
        dropout=0.0, tie_embeddings=bool(random_int(0, 1, generator)))


def _describe(config: TransformerConfig, s: int, t: int, b: int) -> str:
    return (f"d_model={config.d_model}, d_ff={config.d_ff}, N={config.num_encoder_layers}+"
            f"{config.num_decoder_layers}, V={config.vocab_size}, tie_embeddings="
            f"{config.tie_embeddings}, {b} pair(s) of S={s}, T={t}")


@exercise("12.1", "a training step with a frozen encoder")
def check_frozen_encoder_step_flops(frozen_encoder_step_flops) -> str:
    """``frozen_encoder_step_flops(config, src_len, tgt_len, batch)`` equals what
    FlopCounterMode counts for forward + backward of the package's model with its encoder
    (and, untied, its source embedding) frozen."""
    generator = fresh_generator()
    cases = []
    for tie in (True, False):  # both kinds every time, then fresh random ones
        config = _random_small_config(generator).replace(tie_embeddings=tie)
        cases.append((config, random_int(1, 9, generator), random_int(1, 9, generator),
                      random_int(1, 3, generator)))
    cases.append((TransformerConfig(vocab_size=12, d_model=4, num_heads=2, num_encoder_layers=1,
                                    num_decoder_layers=3, d_ff=8, dropout=0.0,
                                    tie_embeddings=False), 1, 1, 1))
    cases += [(_random_small_config(generator), random_int(1, 9, generator),
               random_int(1, 9, generator), random_int(1, 3, generator)) for _ in range(7)]
    for config, s, t, b in cases:
        what = f"a model with {_describe(config, s, t, b)}"
        received = attempt(frozen_encoder_step_flops, config, s, t, b, what=what)
        if isinstance(received, bool) or not isinstance(received, (int, float)):
            raise ExerciseFailure(f"for {what}, expected a number of FLOPs, received "
                                  f"{type(received).__name__}")
        expected = _measured(config, s, t, b, generator)
        if received != expected:
            hints = _hints(received, config, s, t, b)
            hint = f" ({'; '.join(hints)})" if hints else ""
            raise ExerciseFailure(f"for {what}, expected {expected:,} FLOPs (what "
                                  f"FlopCounterMode counts), received {received:,}{hint}")
    base = TransformerConfig.preset("base", 37000, tie_embeddings=False)
    received = attempt(frozen_encoder_step_flops, base, 32, 32, 780, what="the base model")
    expected = frozen_encoder_reference(base, 32, 32, 780)
    if received != expected:
        raise ExerciseFailure(f"for the base model with separate embeddings, 780 pairs of 32 "
                              f"tokens, expected {expected:,}, received {received!r}")
    return (f"equal to FlopCounterMode's count on {len(cases)} fresh models, tied and untied, "
            "and right for the base model")


def gpus_reference(config: TransformerConfig, tokens_per_side: int, seq_len: int,
                   device_name: str, precision: str, mfu: float, floor_seconds: float) -> int:
    """The smallest K with ``training FLOPs of the step / (K x peak x mfu) <= floor``: with
    more GPUs the arithmetic of a step shrinks further, its fixed cost does not."""
    step = training_flops(config, seq_len, seq_len, batch=tokens_per_side // seq_len)
    rate = peak_flops(device_name, precision) * mfu
    return max(1, math.ceil(step / (rate * floor_seconds)))


def _gpu_cases(generator: torch.Generator) -> list[tuple]:
    presets = ("small", "base", "big")
    chips = (("H200", "bf16"), ("A100", "bf16"), ("T4", "fp16"), ("H200", "fp32"))
    cases = [(TransformerConfig.preset("base", 37000), 25_000, 32, "H200", "bf16", 0.35, 8e-3)]
    for _ in range(20):
        config = TransformerConfig.preset(presets[random_int(0, 2, generator)], 37000)
        seq_len = random_int(8, 64, generator)
        tokens = seq_len * random_int(4, 2000, generator)
        chip, precision = chips[random_int(0, len(chips) - 1, generator)]
        mfu = float(torch.empty(1).uniform_(0.1, 0.6, generator=generator))
        floor = float(torch.empty(1).uniform_(1e-3, 5e-2, generator=generator))
        cases.append((config, tokens, seq_len, chip, precision, mfu, floor))
    return cases


@exercise("12.2", "how many GPUs a step can use")
def check_gpus_until_the_floor(gpus_until_the_floor) -> str:
    """``gpus_until_the_floor(config, tokens_per_side, seq_len, device_name, precision, mfu,
    floor_seconds)`` is the smallest number of GPUs at which a data-parallel step's
    arithmetic takes no longer than its fixed cost."""
    generator = fresh_generator()
    cases = _gpu_cases(generator)
    for case in cases:
        config, tokens, seq_len, chip, precision, mfu, floor = case
        what = (f"the {config.d_model}-wide model, {tokens:,} tokens per side in pairs of "
                f"{seq_len}, {chip} in {precision} at MFU {mfu:.2f}, a floor of "
                f"{1e3 * floor:.2f} ms per step")
        received = attempt(gpus_until_the_floor, *case, what=what)
        if isinstance(received, bool) or not isinstance(received, (int, float)):
            raise ExerciseFailure(f"for {what}, expected a number of GPUs, received "
                                  f"{type(received).__name__}")
        expected = gpus_reference(*case)
        if received != expected:
            step = training_flops(config, seq_len, seq_len, batch=tokens // seq_len)
            rate = peak_flops(chip, precision) * mfu
            hints = []
            if received == max(1, math.ceil(step / 3 / (rate * floor))):
                hints.append("a training step is forward and backward, 3 x the forward FLOPs")
            if received == max(1, math.ceil(step / (peak_flops(chip, precision) * floor))):
                hints.append("each GPU delivers only mfu x its peak")
            if received == expected - 1:
                hints.append(f"with {expected - 1} GPUs a step's arithmetic still takes "
                             f"{1e3 * step / ((expected - 1) * rate):.3f} ms, above the floor")
            if received < 1:
                hints.append("a run needs at least one GPU")
            hint = f" ({'; '.join(hints)})" if hints else ""
            raise ExerciseFailure(f"for {what}, expected {expected} GPUs, received "
                                  f"{received!r}{hint}")
    return (f"matched on {len(cases)} runs (the paper's batch on H200s and fresh random "
            "models, batches, chips, utilisations and floors)")
