"""torch.compile sees one graph: the training forward and a cached decoding step of a tiny
Transformer compile with ``fullgraph=True`` (a graph break would raise), on the CPU with the
``aot_eager`` backend (no C++ compiler needed), and give what eager mode gives.

``fullgraph=True`` turns any host-device synchronisation (``bool(tensor)``, ``int(tensor)``,
``.item()``) inside ``forward`` or the decoding step into an error, so this also proves that
no value check runs inside a compiled graph (eager CPU calls check id values; compiled ones
skip every check, as GPU calls skip the value checks).
"""

from __future__ import annotations

import pytest
import torch

from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer

pytestmark = pytest.mark.slow


def _model(**overrides) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig.preset("tiny", 19, **{"dropout": 0.0, "max_len": 16, **overrides})
    return Transformer(config)


def _ids() -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0], [0, 0, 0, 0, 0]])  # padding, all-pad
    tgt = torch.tensor([[1, 4, 9, 11, 2], [1, 12, 3, 2, 0], [1, 5, 2, 0, 0]])
    return src, tgt


@pytest.mark.parametrize("norm_first", [False, True])
def test_training_forward_compiles_without_a_graph_break(norm_first: bool) -> None:
    torch._dynamo.reset()
    model = _model(norm_first=norm_first).train()
    src, tgt = _ids()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(src, tgt), model(src, tgt))  # dropout 0: deterministic
    logits = compiled(src, tgt)
    logits.float().logsumexp(-1).sum().backward()  # the backward graph too
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_cached_decoding_step_compiles_without_a_graph_break() -> None:
    torch._dynamo.reset()
    model = _model().eval()
    src, tgt = _ids()

    def step(new_ids: torch.Tensor, memory: torch.Tensor, cache) -> torch.Tensor:
        return model.decode(new_ids, memory, src, cache=cache)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        memory = model.encode(src)
        eager_cache, compiled_cache = model.new_cache(), model.new_cache()
        for t in range(4):  # the first step projects the memory, the next ones reuse it
            new = tgt[:, t : t + 1]
            expected = step(new, memory, eager_cache)
            torch.testing.assert_close(compiled(new, memory, compiled_cache), expected)
    assert compiled_cache.length == eager_cache.length == 4
