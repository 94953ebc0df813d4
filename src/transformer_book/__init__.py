"""The Transformer, step by step: the package behind the course.

Each idea of *Attention Is All You Need* (Vaswani et al., 2017) has one module here; the
chapters in ``notebooks/`` import them and check their own from-scratch versions against them.
The folders are floors, each built only on the ones below it (CONTRIBUTING.md has the map):

- ``util``: argument checks (``BookError``), atomic files, device and seeds, timing, run records;
- ``data``: Multi30k, BPE, token-budget batches, toy tasks;
- ``nn``: attention, the KV cache, layers, positional encodings, the Transformer;
- ``baselines``: RNNs, the GRU encoder-decoder, convolutional models, pooling, memory networks;
- ``toy``: small attention models on toy tasks, and the one loop that fits them;
- ``run``: a run's TOML configuration and its checkpoints;
- ``inference``: greedy and beam search, translation, checkpoint averaging, sacreBLEU and
  the paired bootstrap;
- ``train``: the objective, one training step, validation and the loop;
- ``analysis``: complexity, compute and MFU, ablations;
- ``course``: exercises and their checkers, figures, assignments, the chapter-model cache.

The front door offers only what a learner types: the model and its configuration, attention
and its masks, positional encodings, the tokenizer and data, training, decoding and
evaluation (``from transformer_book import Transformer``). Everything else is imported from
its floor (``from transformer_book.nn.layers import FeedForward``). Each name is loaded on
first use, so ``import transformer_book`` imports nothing, not even torch. Training is
``from transformer_book.train import train``: a root name ``train`` would shadow the floor
``transformer_book.train`` itself.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

# The floor each name comes from, bottom up.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "util": ("BookError", "set_seed", "get_device"),
    "data": ("BPETokenizer", "load_corpus", "load_multi30k", "TokenBudgetSampler"),
    "nn": (
        "TransformerConfig", "Transformer", "MultiHeadAttention", "scaled_dot_product_attention",
        "causal_mask", "padding_mask", "sinusoidal_encoding", "SinusoidalPositionalEncoding",
        "LearnedPositionalEmbedding", "positional_encoding",
    ),
    "run": ("RunConfig", "load_run_config"),
    "inference": (
        "translate", "greedy_decode", "beam_search", "evaluate", "load_trained",
        "average_checkpoints", "compare_systems",
    ),
}
_OWNER = {name: floor for floor, names in _EXPORTS.items() for name in names}

__all__ = ["__version__", *sorted(_OWNER)]


def __getattr__(name: str) -> Any:
    """Load ``transformer_book.<floor>`` the first time one of its names is asked for."""
    if name not in _OWNER:
        raise AttributeError(f"module 'transformer_book' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"transformer_book.{_OWNER[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
