"""End-to-end memory networks (Sukhbaatar et al., 2015): recurrent attention over a memory.

"Our model takes a discrete set of inputs x_1, ..., x_n that are to be stored in the memory,
a query q, and outputs an answer a." Each hop attends over the memory with the current
controller state u: ``p_i = softmax(uᵀ m_i)``, ``o = Σ_i p_i c_i``, ``u ← u + o``, and the
answer is ``â = softmax(W(o^K + u^K))``.

Vaswani et al. (2017), Section 1: "End-to-end memory networks are based on a recurrent
attention mechanism instead of sequence-aligned recurrence."
"""

from __future__ import annotations

import torch
from torch import nn

from transformer_book.data.tokenizer import PAD_ID
from transformer_book.util.validation import (
    require,
    require_bool,
    require_int,
    require_positive_int,
    require_tensor,
)

__all__ = ["MemoryNetwork", "position_encoding_weights"]


def position_encoding_weights(ids: torch.Tensor, embed_dim: int) -> torch.Tensor:
    """Sukhbaatar et al. Section 4.1 position encoding ``l_kj = (1 - j/J) - (k/d)(1 - 2j/J)``.

    ``j`` (1-based word position) runs over the words of each sentence, ``J`` is the number
    of its non-pad words, ``k`` (1-based) over the ``d = embed_dim`` embedding dimensions.
    ``ids (..., W)`` -> weights ``(..., W, d)``; pad words (id 0) get weight zero.
    """
    real = ids != PAD_ID  # (..., W)
    j = torch.cumsum(real, dim=-1).to(torch.float32)  # (..., W): 1-based position of real words
    big_j = real.sum(-1, keepdim=True).clamp(min=1).to(torch.float32)  # (..., 1)
    k = torch.arange(1, embed_dim + 1, dtype=torch.float32, device=ids.device) / embed_dim  # (d,)
    frac = (j / big_j).unsqueeze(-1)  # (..., W) -> (..., W, 1)
    weights = (1 - frac) - k * (1 - 2 * frac)  # (..., W, d)
    return weights * real.unsqueeze(-1)  # zero for pads


class MemoryNetwork(nn.Module):
    """End-to-end memory network with adjacent weight tying (Sukhbaatar et al., Section 2.2).

    "Adjacent: the output embedding for one layer is the input embedding for the one above,
    i.e. A^{k+1} = C^k. We also constrain (a) the answer prediction matrix to be the same as
    the final output embedding, i.e. W^T = C^K, and (b) the question embedding to match the
    input embedding of the first layer, i.e. B = A^1."

    So there are ``num_hops + 1`` embedding tables ``embeddings[0..K]``: hop ``k`` (1-based)
    reads memory with ``A^k = embeddings[k-1]`` and outputs with ``C^k = embeddings[k]``; the
    question uses ``embeddings[0]`` and the answer logits ``embeddings[K].weight``. Sentences
    are bags of words (optionally position-weighted, Section 4.1); temporal encoding adds
    ``T_A(i)``/``T_C(i)`` per sentence slot ``i`` (tied adjacently as well).

    ``forward(story (B, S, W) ids, question (B, W_q) ids)`` returns ``logits (B, vocab_size)``
    and ``hop_attention (B, K, S)``. Pad id 0 is ignored; all-pad sentences get attention 0.
    ``forward`` checks shapes and dtypes only; the ids are checked once by the training
    function, :func:`transformer_book.toy.fit.train_memory_network`.

    ``linear = True`` switches on the paper's *linear start* (Section 4.2): "the softmax in
    each memory layer removed, making the model entirely linear except for the final softmax
    for answer prediction"; ``hop_attention`` then holds the raw scores ``uᵀ m_i``. Training
    starts with it and switches it off (:func:`transformer_book.toy.hops.train_hops`).
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        num_hops: int = 3,
        max_sentences: int = 50,
        position_encoding: bool = True,
        temporal_encoding: bool = True,
    ) -> None:
        super().__init__()
        self.vocab_size = require_int(vocab_size, "vocab_size", minimum=2)
        self.embed_dim = require_positive_int(embed_dim, "embed_dim")
        self.num_hops = require_positive_int(num_hops, "num_hops")
        self.max_sentences = require_positive_int(max_sentences, "max_sentences")
        self.position_encoding = require_bool(position_encoding, "position_encoding")
        require_bool(temporal_encoding, "temporal_encoding")
        self.embeddings = nn.ModuleList(
            nn.Embedding(vocab_size, embed_dim) for _ in range(num_hops + 1)
        )
        for table in self.embeddings:
            nn.init.normal_(table.weight, std=0.1)
        self.temporal = (
            nn.ParameterList(
                nn.Parameter(torch.randn(max_sentences, embed_dim) * 0.1)
                for _ in range(num_hops + 1)
            )
            if temporal_encoding
            else None
        )
        self.linear = False

    def A(self, hop: int) -> nn.Embedding:
        """Input (memory) embedding of hop ``hop`` (1-based); ``A^1`` is also ``B``."""
        return self.embeddings[hop - 1]

    def C(self, hop: int) -> nn.Embedding:
        """Output embedding of hop ``hop`` (1-based): ``C^k = A^{k+1}``, ``C^K = Wᵀ``."""
        return self.embeddings[hop]

    def _encode(self, ids: torch.Tensor, table: nn.Embedding) -> torch.Tensor:
        """Bag of words: ``ids (..., W)`` -> ``(..., d)``, pads contribute nothing."""
        emb = table(ids)  # (..., W) -> (..., W, d)
        if self.position_encoding:
            weights = position_encoding_weights(ids, self.embed_dim).to(emb.dtype)
        else:
            weights = (ids != PAD_ID).unsqueeze(-1).to(emb.dtype)  # (..., W) -> (..., W, 1)
        return (emb * weights).sum(dim=-2)  # (..., W, d) -> (..., d)

    def forward(
        self, story: torch.Tensor, question: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        require_tensor(story, "story", ndim=3)
        require_tensor(question, "question", ndim=2)
        require(not story.is_floating_point(), "story", "integer token ids", story.dtype)
        require(not question.is_floating_point(), "question", "integer token ids", question.dtype)
        b, s, _ = story.shape
        require(question.shape[0] == b, "question", f"batch size {b} (as story)",
                f"shape {tuple(question.shape)}")
        require(s <= self.max_sentences, "story",
                f"at most max_sentences={self.max_sentences} sentences", f"{s} sentences")
        present = (story != PAD_ID).any(-1)  # (B, S): sentences that hold words
        u = self._encode(question, self.embeddings[0])  # B = A^1: (B, W_q) -> (B, d)
        memories = [self._encode(story, table) for table in self.embeddings]  # K+1 × (B, S, d)
        if self.temporal is not None:
            memories = [m + t[:s] for m, t in zip(memories, self.temporal, strict=True)]
        attentions = []
        for hop in range(self.num_hops):
            m_in, c_out = memories[hop], memories[hop + 1]  # A^{k}, C^{k} with k = hop + 1
            scores = (m_in @ u.unsqueeze(-1)).squeeze(-1)  # (B, S, d) @ (B, d, 1) -> (B, S)
            if self.linear:  # linear start: the scores themselves weight the memories
                p = scores.masked_fill(~present, 0.0)  # (B, S)
            else:
                scores = scores.masked_fill(~present, torch.finfo(scores.dtype).min)
                p = torch.softmax(scores, dim=-1).masked_fill(~present, 0.0)  # (B, S)
            o = (p.unsqueeze(1) @ c_out).squeeze(1)  # (B, 1, S) @ (B, S, d) -> (B, d)
            u = u + o
            attentions.append(p)
        logits = u @ self.embeddings[-1].weight.T  # Wᵀ = C^K: (B, d) @ (d, V) -> (B, V)
        return logits, torch.stack(attentions, dim=1)  # K × (B, S) -> (B, K, S)
