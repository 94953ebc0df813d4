"""Checkers for chapter 09 (the full model)."""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from transformer_book.course.exercises.core import (
    ExerciseFailure,
    attempt,
    exercise,
    expect_close,
    fresh_generator,
    random_int,
)
from transformer_book.nn.attention import padding_mask
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.layers import DecoderLayer
from transformer_book.nn.transformer import Transformer, count_parameters

F64 = torch.float64


def _random_config(generator: torch.Generator, norm_first: bool) -> TransformerConfig:
    heads = random_int(1, 4, generator)
    return TransformerConfig(
        vocab_size=8, d_model=heads * random_int(1, 4, generator), num_heads=heads,
        d_ff=random_int(1, 24, generator), dropout=0.1, norm_first=norm_first,
        layer_norm_eps=(1e-5, 1e-6, 1e-3)[random_int(0, 2, generator)],
    )


def _randomise_norms(layer: nn.Module, generator: torch.Generator) -> None:
    """LayerNorms start at weight 1, bias 0; random values make a swapped norm visible."""
    with torch.no_grad():
        for module in layer.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.copy_(1 + 0.5 * torch.randn(module.weight.shape, generator=generator,
                                                          dtype=F64))
                module.bias.copy_(0.5 * torch.randn(module.bias.shape, generator=generator,
                                                    dtype=F64))


class _Scale(nn.Module):
    """A stand-in for dropout that is easy to trace: multiplies by a fixed factor."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.factor * x


def _check_output(received, expected: torch.Tensor, what: str) -> None:
    if not isinstance(received, torch.Tensor):
        raise ExerciseFailure(f"for {what}, expected a tensor, received {type(received).__name__}")
    expect_close(received, expected, what=what, atol=1e-10, rtol=1e-8)


@exercise("09.1", "decoder_layer, debugged")
def check_decoder_layer(decoder_layer) -> str:
    """``decoder_layer(y, memory, layer, memory_mask)`` must compute what the package's
    ``layer(y, memory, memory_mask)[0]`` computes, post-LN and pre-LN, with residual dropout
    (a stand-in that scales by a fixed factor), from the layer's parts."""
    generator = fresh_generator()
    with torch.random.fork_rng(devices=[]):  # layer initialisation leaves the caller's RNG alone
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        return _check_decoder_layer(decoder_layer, generator)


def _refuse(*args, **kwargs):
    raise RuntimeError("this exercise writes the layer's forward: use its parts (self_attn, "
                       "cross_attn, ffn, norm1..norm3, dropout, norm_first), not layer(...) "
                       "itself")


def _decoder_case(generator: torch.Generator, norm_first: bool, factor: float | None):
    """A fresh float64 DecoderLayer (random norms; ``dropout`` a fixed scale when ``factor``),
    its inputs (T >= 2, a memory whose first sentence is padded) and its own output."""
    config = _random_config(generator, norm_first)
    layer = DecoderLayer(config).to(F64).eval()
    _randomise_norms(layer, generator)
    if factor is not None:
        layer.dropout = _Scale(factor)  # type: ignore[assignment]
    batch = random_int(1, 3, generator)
    t, s = random_int(2, 6, generator), random_int(2, 6, generator)
    y = torch.randn(batch, t, config.d_model, generator=generator, dtype=F64)
    memory = torch.randn(batch, s, config.d_model, generator=generator, dtype=F64)
    ids = torch.ones(batch, s, dtype=torch.long)
    ids[0, random_int(1, s - 1, generator):] = 0  # the first sentence ends in padding
    mask = padding_mask(ids, 0)  # (B, 1, 1, S), True = a real source token
    with torch.no_grad():
        expected = layer(y, memory, mask)[0]
    for name in ("forward", "_in", "_out"):  # the learner wires the parts
        object.__setattr__(layer, name, _refuse)
    return layer, y, memory, mask, ids, expected


def _symptoms(decoder_layer, layer, y, memory, mask, ids, out, what: str) -> list[str]:
    """What a wrong layer gets wrong, found by changing one input at a time.

    Called only once the output is wrong. A masked key gets a weight of exactly 0, so a layer
    that masks correctly gives bit-identical outputs where the change must not reach; any
    difference, however small, is the symptom (a leak can be as small as the mismatch)."""
    found = []
    later = y.clone()
    later[:, -1] += 1.0  # change the last target position only
    with torch.no_grad():
        moved = attempt(decoder_layer, later, memory, layer, mask, what=what)
    if isinstance(moved, torch.Tensor) and moved.shape == out.shape \
            and not torch.equal(moved[:, :-1], out[:, :-1]):  # a masked key adds exactly 0
        found.append("changing the last target position changed the outputs at earlier "
                     "positions: a position sees its future")
    padded = memory.clone()
    padded[ids == 0] += 1.0  # change the memory at padded source positions only
    with torch.no_grad():
        moved = attempt(decoder_layer, y, padded, layer, mask, what=what)
    if isinstance(moved, torch.Tensor) and moved.shape == out.shape \
            and not torch.equal(moved, out):
        found.append("changing the memory at padded source positions changed the output")
    return found


_STAGES = (  # (norm_first, dropout stand-in factor, what a failure at this stage points at)
    (False, None, ""),
    (False, 0.5, "it matched the package with dropout off (eval mode), so look at where the "
                 "dropout goes: Section 5.4 drops the output of each sub-layer, before it is "
                 "added to the sub-layer input and normalized"),
    (True, None, "post-LN layers matched, pre-LN ones do not: in pre-LN, which tensor does "
                 "the residual connection add the sub-layer's output to?"),
    (True, 0.5, "pre-LN matched with dropout off, not with it: look at where the dropout goes"),
)


def _check_decoder_layer(decoder_layer, generator: torch.Generator) -> str:
    layers_checked = 0
    for norm_first, factor, hint in _STAGES:
        for _ in range(3):
            layer, y, memory, mask, ids, expected = _decoder_case(generator, norm_first, factor)
            kind = "pre-LN (norm_first=True)" if norm_first else "post-LN (norm_first=False)"
            dropout = (f", layer.dropout multiplying by {factor}" if factor is not None
                       else ", dropout off")
            what = (f"a {kind} DecoderLayer with d_model={y.shape[-1]}{dropout}, y "
                    f"{tuple(y.shape)}, memory {tuple(memory.shape)} with padding")
            with torch.no_grad():
                out = attempt(decoder_layer, y, memory, layer, mask, what=what)
            if not isinstance(out, torch.Tensor):
                raise ExerciseFailure(f"for {what}, expected a tensor, received "
                                      f"{type(out).__name__}")
            close = out.shape == expected.shape and torch.allclose(
                out.to(F64), expected, atol=1e-10, rtol=1e-8)
            if not close:
                found = _symptoms(decoder_layer, layer, y, memory, mask, ids, out, what)
                found += [hint] if hint else []
                if found:
                    what = f"{what} ({'; '.join(found)})"
                _check_output(out, expected, what)
            layers_checked += 1
    return (
        f"matched {layers_checked} fresh decoder layers of the package (post-LN and pre-LN, "
        "random LayerNorm weights, padded memories), with dropout off and with a stand-in "
        "dropout that scales by a fixed factor"
    )


def _random_model_config(generator: torch.Generator) -> TransformerConfig:
    heads = random_int(1, 4, generator)
    return TransformerConfig(
        vocab_size=random_int(4, 300, generator),
        d_model=heads * random_int(1, 6, generator) * 2,  # even, for the sinusoids
        num_heads=heads,
        num_encoder_layers=random_int(1, 3, generator),
        num_decoder_layers=random_int(1, 3, generator),
        d_ff=random_int(1, 40, generator),
        max_len=random_int(1, 64, generator),
        tie_embeddings=bool(random_int(0, 1, generator)),
        positional=("sinusoidal", "learned")[random_int(0, 1, generator)],
        norm_first=(norm_first := bool(random_int(0, 1, generator))),
        final_norm=norm_first or bool(random_int(0, 1, generator)),
        generator_bias=bool(random_int(0, 1, generator)),
    )


def _describe(config: TransformerConfig) -> str:
    return (f"vocab_size={config.vocab_size}, d_model={config.d_model}, "
            f"N={config.num_encoder_layers}+{config.num_decoder_layers}, d_ff={config.d_ff}, "
            f"tie_embeddings={config.tie_embeddings}, final_norm={config.final_norm}, "
            f"generator_bias={config.generator_bias}, positional={config.positional!r}, "
            f"max_len={config.max_len}")


@contextlib.contextmanager
def _no_modules_built():
    """While it is open, building any ``nn.Module`` (the model or one of its parts) raises:
    09.2 asks for the count from the config alone, without building the model."""
    original = nn.Module.__init__

    def refuse(self, *args, **kwargs):
        raise RuntimeError(f"this exercise counts the parameters from the config alone, "
                           f"without building a module (here {type(self).__name__}): write "
                           "the count of each part as a formula")

    nn.Module.__init__ = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.__init__ = original  # type: ignore[method-assign]


@exercise("09.2", "count_transformer_parameters")
def check_count_transformer_parameters(count_transformer_parameters) -> str:
    """``count_transformer_parameters(config)`` must equal ``count_parameters(Transformer(config))``
    without building the model."""
    generator = fresh_generator()
    configs = [_random_model_config(generator) for _ in range(16)]
    configs += [
        TransformerConfig.preset("base", vocab_size=37000),
        TransformerConfig.preset("big", vocab_size=37000),
        TransformerConfig.preset("base", vocab_size=37000, tie_embeddings=False),
        TransformerConfig.preset("base", vocab_size=37000, final_norm=True, generator_bias=True),
        TransformerConfig.preset("tiny", vocab_size=16, positional="learned", max_len=32),
        TransformerConfig(vocab_size=3, d_model=2, num_heads=1, num_encoder_layers=1,
                          num_decoder_layers=1, d_ff=1, max_len=1),
    ]
    for config in configs:
        what = f"a config with {_describe(config)}"
        with torch.device("meta"), torch.random.fork_rng(devices=[]):  # shapes only
            expected = count_parameters(Transformer(config))
        with _no_modules_built():
            received = attempt(count_transformer_parameters, config, what=what)
        if isinstance(received, torch.Tensor) and received.numel() == 1:
            received = received.item()
        if isinstance(received, bool) or not isinstance(received, int | float):
            raise ExerciseFailure(f"for {what}, expected an int, received {received!r}")
        if received != expected:
            raise ExerciseFailure(f"for {what}, expected {expected:,} parameters, "
                                  f"received {received:,} (off by {received - expected:+,})")
    return (
        f"matched count_parameters(Transformer(config)) on {len(configs)} configs: random "
        "widths, depths and vocabularies, tied and untied embeddings, with and without final "
        "norms and a generator bias, sinusoidal and learned positions, and the base and big "
        "presets"
    )
