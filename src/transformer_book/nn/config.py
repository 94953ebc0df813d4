"""The model's hyperparameters: :class:`TransformerConfig` and its named sizes.

:class:`TransformerConfig` holds the numbers of Table 3 of *Attention Is All You Need*
(Vaswani et al., 2017) -- N, d_model, d_ff, h, d_k, d_v, P_drop, ε_ls -- plus the choices the
paper leaves implicit (positions, weight tying, LayerNorm placement). A training run's
settings, what ``transformer-book train`` reads from ``configs/*.toml``, are
:class:`transformer_book.run.config.RunConfig`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from transformer_book.nn.positional import require_positional_kind
from transformer_book.util.registry import Registry
from transformer_book.util.validation import (
    is_real,
    require,
    require_int,
    require_positive_int,
    require_probability,
)

# nn.Transformer's layout (a final LayerNorm after each stack, a generator bias): what every
# model of this course was before the paper's layout became the default.
LEGACY_LAYOUT: dict[str, Any] = {"final_norm": True, "generator_bias": True}

# Table 3: "base" and "big" rows; "tiny" and "small" are this course's CPU sizes. A registry
# open to outside packages (entry-point group transformer_book.presets, or --plugin).
PRESETS: Registry[dict[str, Any]] = Registry("preset", "transformer_book.presets", {
    # Toy tasks and unit tests: trains in seconds on a CPU.
    "tiny": dict(d_model=64, num_heads=4, num_encoder_layers=2, num_decoder_layers=2,
                 d_ff=128, dropout=0.1),
    # A Multi30k run on a laptop CPU (chapter 10).
    "small": dict(d_model=256, num_heads=8, num_encoder_layers=3, num_decoder_layers=3,
                  d_ff=1024, dropout=0.1),
    # Table 3, "base": N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64, P_drop=0.1, ε_ls=0.1.
    "base": dict(d_model=512, num_heads=8, num_encoder_layers=6, num_decoder_layers=6,
                 d_ff=2048, dropout=0.1),
    # Table 3, "big": N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3.
    "big": dict(d_model=1024, num_heads=16, num_encoder_layers=6, num_decoder_layers=6,
                d_ff=4096, dropout=0.3),
})


@dataclass(frozen=True)
class TransformerConfig:
    """Every hyperparameter of the encoder-decoder Transformer.

    Table 3 (base model): N=6 layers, d_model=512, d_ff=2048, h=8, d_k=d_v=64,
    P_drop=0.1, ε_ls=0.1. Section 5.4: "We apply dropout to the output of each sub-layer,
    before it is added to the sub-layer input and normalized. In addition, we apply dropout
    to the sums of the embeddings and the positional encodings" -- that is ``dropout``;
    dropout on the attention weights is kept separate (``attention_dropout``, 0 by default).

    Fields:
        vocab_size: size of the (joint) vocabulary V; logits have shape (B, T, V).
        d_model: width of every residual stream, (B, L, d_model).
        num_heads: h; each head has d_k = d_v = d_model // h.
        num_encoder_layers / num_decoder_layers: N for each stack.
        d_ff: inner width of the position-wise feed-forward network (Section 3.3).
        dropout: P_drop on sub-layer outputs and embedding sums (Section 5.4).
        attention_dropout: dropout on attention weights (not in the paper; default 0).
        max_len: number of positions the positional encoding covers.
        pad_id / bos_id / eos_id: special token ids.
        norm_first: False is the paper's post-LN ``LayerNorm(x + Sublayer(x))``;
            True is pre-LN ``x + Sublayer(LayerNorm(x))``.
        final_norm: a LayerNorm after the last layer of each stack. The paper's post-LN
            stacks have none (each layer already ends in one); ``nn.Transformer`` always
            adds it, and pre-LN needs it (its residual stream is never normalised
            otherwise). ``None`` (default) means "as ``norm_first``": False for the paper.
        generator_bias: a bias in the pre-softmax linear transformation. Section 3.4 shares
            the embedding matrix with it and names no bias (False, the default);
            ``nn.Transformer``-style models add one (True).
        tie_embeddings: Section 3.4, "we share the same weight matrix between the two
            embedding layers and the pre-softmax linear transformation" (joint vocabulary).
        positional: a kind of :data:`~transformer_book.nn.positional.POSITIONAL_ENCODINGS`:
            "sinusoidal" (Section 3.5), "learned" (Table 3, row E), "fourier" (random
            Fourier features) or "none".
        layer_norm_eps: ε of every LayerNorm.
        label_smoothing: ε_ls (Section 5.4).
    """

    vocab_size: int
    d_model: int = 512
    num_heads: int = 8
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    max_len: int = 256
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    norm_first: bool = False
    final_norm: bool | None = None
    generator_bias: bool = False
    tie_embeddings: bool = True
    positional: str = "sinusoidal"
    layer_norm_eps: float = 1e-5
    label_smoothing: float = 0.1

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "num_heads", "num_encoder_layers",
                     "num_decoder_layers", "d_ff", "max_len"):
            require_positive_int(getattr(self, name), name)
        for name in ("pad_id", "bos_id", "eos_id"):
            value = getattr(self, name)
            require_int(value, name, minimum=0)
            require(value < self.vocab_size, name, f"an id < vocab_size={self.vocab_size}", value)
        require(len({self.pad_id, self.bos_id, self.eos_id}) == 3, "pad_id/bos_id/eos_id",
                "three different ids", (self.pad_id, self.bos_id, self.eos_id))
        require(self.d_model % self.num_heads == 0, "d_model",
                f"a multiple of num_heads={self.num_heads}", self.d_model)
        require_probability(self.dropout, "dropout")
        require_probability(self.attention_dropout, "attention_dropout")
        require_probability(self.label_smoothing, "label_smoothing")
        require_positional_kind(self.positional, "positional")
        require(isinstance(self.norm_first, bool), "norm_first", "a bool", repr(self.norm_first))
        if self.final_norm is None:
            object.__setattr__(self, "final_norm", self.norm_first)
        for name in ("final_norm", "generator_bias", "tie_embeddings"):
            require(isinstance(getattr(self, name), bool), name, "a bool",
                    repr(getattr(self, name)))
        require(self.final_norm or not self.norm_first, "final_norm",
                "True with norm_first=True (a pre-LN stack's output is never normalised "
                "otherwise)", self.final_norm)
        eps = self.layer_norm_eps
        require(is_real(eps)
                and math.isfinite(eps) and eps > 0, "layer_norm_eps", "a positive number",
                repr(eps))

    @property
    def d_k(self) -> int:
        """Query/key width per head, d_model / h (Section 3.2.2: 512 / 8 = 64)."""
        return self.d_model // self.num_heads

    @property
    def d_v(self) -> int:
        """Value width per head, d_model / h (Section 3.2.2)."""
        return self.d_model // self.num_heads

    @classmethod
    def preset(cls, name: str, vocab_size: int, **overrides: Any) -> TransformerConfig:
        """A named size ("tiny", "small", "base", "big") with ``overrides`` applied.

        "base" and "big" are the rows of Table 3; "tiny" (toy tasks, tests) and "small"
        (Multi30k on a CPU) are this course's.
        """
        sizes = PRESETS.get(name, "name")
        _check_keys(overrides, "overrides")
        return cls(vocab_size=vocab_size, **{**sizes, **overrides})

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain JSON/TOML-friendly dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TransformerConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise a ``ValueError`` listing them.

        A dict saved before ``final_norm`` and ``generator_bias`` existed (no such keys)
        describes the layout every model had then, ``nn.Transformer``'s: final norms and a
        generator bias. Old checkpoints therefore load as they were trained.
        """
        require(isinstance(d, dict), "d", "a dict", type(d).__name__)
        _check_keys(d, "d")
        if "final_norm" not in d and "generator_bias" not in d:
            d = {**d, **LEGACY_LAYOUT}
        return cls(**d)

    def replace(self, **changes: Any) -> TransformerConfig:
        """A copy with ``changes`` applied (validated like a new config)."""
        _check_keys(changes, "changes")
        return dataclasses.replace(self, **changes)


def _check_keys(d: dict[str, Any], argument: str) -> None:
    known = {f.name for f in dataclasses.fields(TransformerConfig)}
    unknown = sorted(set(d) - known)
    require(not unknown, argument, f"TransformerConfig fields {sorted(known)}",
            f"unknown keys {unknown}")
