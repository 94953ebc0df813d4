"""Decoding with int8 weights: dynamic quantisation of the Transformer's linear layers.

Systems that serve translation models (CTranslate2's ``compute_type="int8"``, for one)
store the weight matrices in 8-bit integers and quantise each layer's input on the fly,
which shrinks the model about four times and speeds up matrix products on the CPU.
:func:`quantize_for_decoding` does the same with PyTorch's dynamic quantisation
(``torch.ao.quantization.quantize_dynamic``, ``qint8``): each weight matrix gets one int8
scale, each activation a scale computed at every call, and the products accumulate in int32
before going back to float32.

What is quantised, per layer of the encoder and the decoder: every attention's output
projection ``out_proj`` (W^O) and the feed-forward ``linear1`` and ``linear2`` (W1, W2);
and the generator, the output projection to the vocabulary. With tied embeddings
(Section 3.4) the generator's weight is the target embedding: the copy's generator holds
an int8 copy of that matrix while the embedding itself stays float32. What is not: the
packed attention input projections ``in_proj`` (W^Q, W^K, W^V), which the attention slices
row-wise and applies with ``F.linear`` instead of calling as a module (so a quantised
module could not serve them), the embeddings, the layer norms and the attention's
softmax. Dynamic quantised layers run on the CPU only.
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn
from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

from transformer_book.nn.attention import MultiHeadAttention
from transformer_book.nn.transformer import Transformer
from transformer_book.util.validation import require

__all__ = ["quantizable_linears", "quantize_for_decoding"]


def quantizable_linears(model: Transformer) -> list[str]:
    """Names of the ``nn.Linear`` modules of ``model`` that :func:`quantize_for_decoding`
    quantises: all that the forward pass calls as modules, i.e. every one but the attention
    layers' packed ``in_proj``, whose weight is sliced and applied with ``F.linear``."""
    require(isinstance(model, Transformer), "model", "a transformer_book Transformer",
            type(model).__name__)
    sliced = {f"{name}.in_proj" if name else "in_proj" for name, module in model.named_modules()
              if isinstance(module, MultiHeadAttention)}
    return [name for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and name not in sliced]


def quantize_for_decoding(model: Transformer) -> Transformer:
    """A copy of ``model`` whose linear layers hold int8 weights, for decoding on the CPU.

    The copy is in eval mode and is decoded like the original (``translate_ids``, greedy or
    beam search); ``model`` is left unchanged. The layers quantised are
    :func:`quantizable_linears`'s (see the module docstring for what is and is not).

    Args:
        model: a float32 :class:`~transformer_book.nn.transformer.Transformer` on the CPU.

    Returns:
        The quantised copy, its quantised layers ``DynamicQuantizedLinear`` modules.
    """
    names = quantizable_linears(model)
    weight = next(model.parameters())
    require(weight.device.type == "cpu", "model",
            "a model on the CPU (dynamic int8 layers run on the CPU only)",
            f"a model on {weight.device}")
    require(all(p.dtype == torch.float32 for p in model.parameters()), "model",
            "float32 weights", sorted({str(p.dtype) for p in model.parameters()}))
    copied = copy.deepcopy(model).eval()
    with warnings.catch_warnings():
        # torch.ao.quantization announces its move to the torchao package; the eager
        # dynamic quantisation used here still works as documented.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
        quantized = quantize_dynamic(copied, {name: default_dynamic_qconfig for name in names},
                                     dtype=torch.qint8, inplace=True)
    assert isinstance(quantized, Transformer), "quantize_dynamic keeps the root module"
    return quantized
