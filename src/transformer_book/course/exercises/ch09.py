"""Checkers for chapter 09 (the full model)."""

from __future__ import annotations

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
from transformer_book.nn.layers import DecoderLayer, EncoderLayer
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


@exercise("09.1", "sublayer_connection")
def check_sublayer_connection(sublayer_connection) -> str:
    """``sublayer_connection(x, sublayer, norm, dropout, norm_first=False)`` must be the
    package's residual wrapper: ``norm(x + dropout(sublayer(x)))`` (post-LN) or
    ``x + dropout(sublayer(norm(x)))`` (pre-LN)."""
    generator = fresh_generator()
    with torch.random.fork_rng(devices=[]):  # layer initialisation leaves the caller's RNG alone
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        return _check_sublayer_connection(sublayer_connection, generator)


def _layer_case(config: TransformerConfig, x: torch.Tensor, encoder: bool, kind: str,
                generator: torch.Generator) -> tuple[nn.Module, torch.Tensor, list, str]:
    """A fresh layer, its output on ``x``, its sub-layers with their norms in order, and
    what the case is called (``kind``: where the LayerNorm goes)."""
    batch, length = x.shape[:2]
    if encoder:  # an encoder layer: self-attention, then the feed-forward network
        layer = EncoderLayer(config).to(F64).eval()
        _randomise_norms(layer, generator)
        ids = torch.randint(4, 8, (batch, length), generator=generator)
        ids[0, random_int(1, length, generator):] = 0  # pad the end of the first sentence
        mask = padding_mask(ids, 0)  # (B, 1, 1, L)
        what = f"an EncoderLayer with d_model={config.d_model}, {kind}, x {tuple(x.shape)}"
        with torch.no_grad():
            expected = layer(x, mask)[0]

        def attend(h, layer=layer, mask=mask):
            return layer.self_attn(h, h, h, mask=mask)[0]

        return layer, expected, [(attend, layer.norm1), (layer.ffn, layer.norm2)], what
    # a decoder layer: masked self-attention, cross-attention, feed-forward
    layer = DecoderLayer(config).to(F64).eval()
    _randomise_norms(layer, generator)
    memory = torch.randn(batch, random_int(1, 5, generator), config.d_model,
                         generator=generator, dtype=F64)
    what = f"a DecoderLayer with d_model={config.d_model}, {kind}, y {tuple(x.shape)}"
    with torch.no_grad():
        expected = layer(x, memory)[0]

    def self_attend(h, layer=layer):
        return layer.self_attn(h, h, h, is_causal=True)[0]

    def cross_attend(h, layer=layer, memory=memory):
        return layer.cross_attn(h, memory, memory)[0]

    steps = [(self_attend, layer.norm1), (cross_attend, layer.norm2), (layer.ffn, layer.norm3)]
    return layer, expected, steps, what


def _check_sublayer_connection(sublayer_connection, generator: torch.Generator) -> str:
    layers_checked = 0
    for index in range(12):
        norm_first = bool(index % 2)
        config = _random_config(generator, norm_first)
        kind = "LN first (pre-LN)" if norm_first else "LN after the sum (post-LN)"
        batch, length = random_int(1, 3, generator), random_int(1, 6, generator)
        x = torch.randn(batch, length, config.d_model, generator=generator, dtype=F64)
        layer, expected, steps, what = _layer_case(config, x, index % 4 < 2, kind, generator)
        h = x.clone()
        with torch.no_grad():
            for sublayer, norm in steps:
                h = attempt(sublayer_connection, h, sublayer, norm, layer.dropout,
                            norm_first=norm_first, what=what)
                if not isinstance(h, torch.Tensor):
                    raise ExerciseFailure(
                        f"for {what}, expected a tensor, received {type(h).__name__}")
        _check_output(h, expected, f"{what} (eval mode, dropout off), built from "
                                   "sublayer_connection calls")
        layers_checked += 1
    # Where the dropout goes: on the sub-layer's output only, never on the residual path.
    for norm_first in (False, True):
        d = 6
        x = torch.randn(2, 3, d, generator=generator, dtype=F64)
        norm = nn.LayerNorm(d).to(F64)
        linear = nn.Linear(d, d).to(F64)
        _randomise_norms(norm, generator)
        half = _Scale(0.5)
        with torch.no_grad():
            expected = x + half(linear(norm(x))) if norm_first else norm(x + half(linear(x)))
        what = ("a 'dropout' that multiplies by 0.5, norm_first="
                f"{norm_first}: it must scale Sublayer's output and nothing else")
        with torch.no_grad():
            received = attempt(sublayer_connection, x.clone(), linear, norm, half,
                               norm_first=norm_first, what=what)
        _check_output(received, expected, what)
    return (
        f"built {layers_checked} fresh encoder and decoder layers (post-LN and pre-LN, random "
        "widths, padding and causal masks) from your function and matched the package's "
        "layers, and applied dropout to the sub-layer output only"
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
