"""Chapters 06 to 13: every code exercise's checker rejects the mistakes learners make and
accepts a correct answer written another way.

Each wrong answer is a small function named after its mistake; the checker must fail it with
a message that says which input it tried, what it expected and what it received. Each right
answer differs from the notebook's solution (another formulation, a loop, another dtype) and
must pass. Functions defined in this module count as the learner's own
(:func:`~transformer_book.course.exercises.core.foreign_origin` gives ``None`` for them), so
a wrapper around a library function is checked like any answer, as in a notebook.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict

import pytest
import torch
import torch.nn.functional as F

from transformer_book.analysis.compute import peak_flops, training_flops, transformer_flops
from transformer_book.course.exercises import run_check
from transformer_book.course.exercises.core import REGISTRY, foreign_origin, load_all
from transformer_book.nn.attention import causal_mask, scaled_dot_product_attention
from transformer_book.toy.aligner import expected_alignment

# ----------------------------------------------------------------------------- 06.1


def split_heads_view_without_transpose(x, h):
    return x.reshape(*x.shape[:-2], h, x.shape[-2], x.shape[-1] // h)


def split_heads_strided_columns(x, h):  # head i gets columns i, i + h, i + 2h, ...
    return x.unflatten(-1, (x.shape[-1] // h, h)).movedim(-1, -3)


def split_heads_positive_dims(x, h):  # transpose(1, 2) is right for (B, L, d) only
    return x.unflatten(-1, (h, x.shape[-1] // h)).transpose(1, 2)


def split_heads_first_attempt(x, h):  # the exercise's first attempt: the chapter's split
    return x.view(*x.shape[:-1], h, x.shape[-1] // h).transpose(1, 2)


def split_heads_assumes_batch(x, h):
    return x.view(x.shape[0], x.shape[1], h, -1).transpose(1, 2)


def split_heads_swaps_the_last_two(x, h):  # (..., L, d_k, h): transposes the wrong pair
    return x.unflatten(-1, (h, x.shape[-1] // h)).transpose(-2, -1)


def split_heads_permute(x, h):  # permute(0, 2, 1, 3) names the axes of (B, L, h, d_k) only
    return x.unflatten(-1, (h, x.shape[-1] // h)).permute(0, 2, 1, 3)


def split_heads_chunks(x, h):  # right: h slices of d_k columns, stacked before L
    return torch.stack(x.chunk(h, dim=-1), dim=-3)


def split_heads_loop(x, h):  # right: a loop over heads (06.1 allows one)
    d_k = x.shape[-1] // h
    return torch.stack([x[..., i * d_k:(i + 1) * d_k] for i in range(h)], dim=-3)


def split_heads_movedim(x, h):  # right: movedim, which names the axis to move
    return x.unflatten(-1, (h, x.shape[-1] // h)).movedim(-2, -3)


# ----------------------------------------------------------------------------- 06.2


def _split(t, h):  # (B, L, d_model) -> (B, h, L, d_k)
    return t.unflatten(-1, (h, t.shape[-1] // h)).transpose(1, 2)


def _merge(t):  # (B, h, L, d_k) -> (B, L, d_model)
    return t.transpose(1, 2).flatten(-2)


def _keys(key_mask):  # (B, L_k) -> (B, 1, 1, L_k), the layout the heads need
    return None if key_mask is None else key_mask[:, None, None, :]


def _attend(q, k, v, mask, scale, after_softmax=False):
    scores = q @ k.transpose(-2, -1) / scale
    if mask is not None and not after_softmax:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a fully masked query: zeros
    if mask is not None and after_softmax:
        weights = weights * mask
    return weights @ v


def mha_scaled_by_d_model(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None):
    q, k, v = _split(query @ W_q, h), _split(key @ W_k, h), _split(value @ W_v, h)
    return _merge(_attend(q, k, v, _keys(key_mask), math.sqrt(query.shape[-1]))) @ W_o


def mha_mask_after_softmax(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None):
    q, k, v = _split(query @ W_q, h), _split(key @ W_k, h), _split(value @ W_v, h)
    return _merge(_attend(q, k, v, _keys(key_mask), math.sqrt(q.shape[-1]),
                          after_softmax=True)) @ W_o


def mha_split_without_transpose(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None):
    def split(t):
        return t.reshape(t.shape[0], h, t.shape[1], -1)

    out, _ = scaled_dot_product_attention(split(query @ W_q), split(key @ W_k),
                                          split(value @ W_v), _keys(key_mask))
    return out.reshape(query.shape) @ W_o


def mha_merge_without_transpose(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None):
    out, _ = scaled_dot_product_attention(_split(query @ W_q, h), _split(key @ W_k, h),
                                          _split(value @ W_v, h), _keys(key_mask))
    return out.reshape(query.shape) @ W_o


def mha_keys_from_query(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None):
    if key_mask is not None and key_mask.shape[-1] != query.shape[1]:
        key_mask = None
    out, _ = scaled_dot_product_attention(_split(query @ W_q, h), _split(query @ W_k, h),
                                          _split(query @ W_v, h), _keys(key_mask))
    return _merge(out) @ W_o


def mha_first_attempt(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None):
    # the exercise's first attempt: the (B, 1, L_k) mask of one head at a time, whose B
    # lines up with the heads axis of (B, h, L_q, L_k)
    out, _ = scaled_dot_product_attention(_split(query @ W_q, h), _split(key @ W_k, h),
                                          _split(value @ W_v, h),
                                          None if key_mask is None else key_mask[:, None, :])
    return _merge(out) @ W_o


def mha_mask_inverted(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None):
    # PyTorch's convention (True = hidden), where the exercise's True means a real key
    mask = None if key_mask is None else ~_keys(key_mask)
    out, _ = scaled_dot_product_attention(_split(query @ W_q, h), _split(key @ W_k, h),
                                          _split(value @ W_v, h), mask)
    return _merge(out) @ W_o


def mha_mask_over_queries(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None):
    # (B, 1, L, 1): hides query rows instead of key columns (fits self-attention's shape)
    mask = None if key_mask is None else key_mask[:, None, :, None]
    out, _ = scaled_dot_product_attention(_split(query @ W_q, h), _split(key @ W_k, h),
                                          _split(value @ W_v, h), mask)
    return _merge(out) @ W_o


def mha_split_with_the_query_length(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None):
    b, l_q, d_model = query.shape  # the chapter's split, reading B and L from the query

    def split(t):
        return t.view(b, l_q, h, d_model // h).transpose(1, 2)

    out, _ = scaled_dot_product_attention(split(query @ W_q), split(key @ W_k),
                                          split(value @ W_v), _keys(key_mask))
    return _merge(out) @ W_o


def mha_wraps_the_package_layer(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None):
    from transformer_book.nn.attention import MultiHeadAttention

    layer = MultiHeadAttention(query.shape[-1], h, bias=False).to(query.dtype)
    with torch.no_grad():
        layer.in_proj.weight.copy_(torch.cat([W_q.T, W_k.T, W_v.T]))
        layer.out_proj.weight.copy_(W_o.T)
        return layer(query, key, value, mask=_keys(key_mask))[0]


def mha_loop_over_heads(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None):
    d_k = query.shape[-1] // h
    heads = []
    for i in range(h):  # one attention call per head, which 06.2 asks not to write
        cols = slice(i * d_k, (i + 1) * d_k)
        out, _ = scaled_dot_product_attention(query @ W_q[:, cols], key @ W_k[:, cols],
                                              value @ W_v[:, cols],
                                              None if key_mask is None else key_mask[:, None])
        heads.append(out)
    return torch.cat(heads, -1) @ W_o


def mha_einsum(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None):  # right
    d_k = query.shape[-1] // h
    q = torch.einsum("bld,dhk->bhlk", query, W_q.unflatten(1, (h, d_k)))
    k = torch.einsum("bld,dhk->bhlk", key, W_k.unflatten(1, (h, d_k)))
    v = torch.einsum("bld,dhk->bhlk", value, W_v.unflatten(1, (h, d_k)))
    out = _attend(q, k, v, _keys(key_mask), math.sqrt(d_k))
    return torch.einsum("bhlk,hkd->bld", out, W_o.unflatten(0, (h, d_k)))


def mha_heads_in_the_batch(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None):  # right
    b = query.shape[0]

    def fold(t):  # (B, L, d_model) -> (B, h, L, d_k) -> (B·h, L, d_k)
        return _split(t, h).flatten(0, 1)

    mask = None
    if key_mask is not None:  # (B, L_k) -> (B·h, 1, L_k): each example's mask, h times
        mask = key_mask.repeat_interleave(h, dim=0)[:, None, :]
    out, _ = scaled_dot_product_attention(fold(query @ W_q), fold(key @ W_k),
                                          fold(value @ W_v), mask)
    # (B·h, L_q, d_k) -> (B, h, L_q, d_k) -> (B, L_q, d_model)
    return _merge(out.unflatten(0, (b, h))) @ W_o


# ----------------------------------------------------------------------------- 07.1


def _cross(dec, enc, W_q, W_k, W_v, mask, *, scale=None, fill=float("-inf"), dim=-1,
           after=False, keys_from=None):
    q, k, v = dec @ W_q, (enc if keys_from is None else keys_from) @ W_k, enc @ W_v
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None and not after:
        scores = scores.masked_fill(~mask[:, None, :], fill)
    weights = torch.softmax(scores, dim=dim)
    if mask is not None and after:
        weights = weights * mask[:, None, :]
    return weights @ v, weights


def cross_unscaled(dec, enc, W_q, W_k, W_v, memory_mask=None):
    return _cross(dec, enc, W_q, W_k, W_v, memory_mask, scale=1.0)


def cross_scaled_by_d_v(dec, enc, W_q, W_k, W_v, memory_mask=None):
    return _cross(dec, enc, W_q, W_k, W_v, memory_mask, scale=math.sqrt(W_v.shape[1]))


def cross_mask_after_softmax(dec, enc, W_q, W_k, W_v, memory_mask=None):
    return _cross(dec, enc, W_q, W_k, W_v, memory_mask, after=True)


def cross_softmax_over_queries(dec, enc, W_q, W_k, W_v, memory_mask=None):
    return _cross(dec, enc, W_q, W_k, W_v, memory_mask, dim=-2)


def cross_mask_over_queries(dec, enc, W_q, W_k, W_v, memory_mask=None):  # (B, L_k, 1)
    q, k, v = dec @ W_q, enc @ W_k, enc @ W_v
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if memory_mask is not None:
        scores = scores.masked_fill(~memory_mask[:, :, None][:, : scores.shape[1]],
                                    float("-inf")).nan_to_num(-1e30)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def cross_large_negative_fill(dec, enc, W_q, W_k, W_v, memory_mask=None):  # right
    return _cross(dec, enc, W_q, W_k, W_v, memory_mask, fill=-1e9)


# ----------------------------------------------------------------------------- 07.2


def alignment_mean_of_fractions(weights, src_lengths):
    fractions = []
    for b, n in enumerate(src_lengths.tolist()):
        picked = weights[b, :n].argmax(-1)
        fractions.append(float((picked == torch.arange(n - 1, -1, -1)).float().mean()))
    return sum(fractions) / len(fractions)


def alignment_counts_padded_rows(weights, src_lengths):
    hits = 0
    for b, n in enumerate(src_lengths.tolist()):
        picked = weights[b].argmax(-1)  # (T,): padded rows included
        hits += int((picked == n - 1 - torch.arange(weights.shape[1])).sum())
    return hits / (weights.shape[0] * weights.shape[1])


def alignment_off_by_one(weights, src_lengths):
    hits, total = 0, 0
    for b, n in enumerate(src_lengths.tolist()):
        picked = weights[b, :n].argmax(-1)
        hits += int((picked == n - torch.arange(n)).sum())
        total += n
    return hits / total


def alignment_reversed_over_padded_width(weights, src_lengths):
    hits, total = 0, 0
    width = weights.shape[-1]
    for b, n in enumerate(src_lengths.tolist()):
        picked = weights[b, :n].argmax(-1)
        hits += int((picked == width - 1 - torch.arange(n)).sum())
        total += n
    return hits / total


def alignment_argmax_over_outputs(weights, src_lengths):
    hits, total = 0, 0
    for b, n in enumerate(src_lengths.tolist()):
        picked = weights[b, :, :n].argmax(0)  # the largest weight of each source column
        hits += int((picked == torch.arange(n - 1, -1, -1)).sum())
        total += n
    return hits / total


def alignment_vectorised(weights, src_lengths):  # right
    t = torch.arange(weights.shape[1])
    real = t[None, :] < src_lengths[:, None]  # (B, T)
    right = weights.argmax(-1) == src_lengths[:, None] - 1 - t[None, :]
    return float((right & real).sum()) / float(real.sum())


# ----------------------------------------------------------------------------- 07.5


def blind_first_allowed_only(sources, task):
    counts, rows = defaultdict(Counter), 0
    for source in sources:
        for i, allowed in enumerate(expected_alignment(task, source)):
            counts[len(source), i][allowed[0]] += 1
            rows += 1
    return sum(max(c.values()) for c in counts.values()) / rows


def blind_ignores_length(sources, task):
    counts, rows = defaultdict(Counter), 0
    for source in sources:
        for i, allowed in enumerate(expected_alignment(task, source)):
            counts[i].update(allowed)
            rows += 1
    return sum(max(c.values()) for c in counts.values()) / rows


def blind_mean_over_slots(sources, task):
    counts, seen = defaultdict(Counter), Counter()
    for source in sources:
        for i, allowed in enumerate(expected_alignment(task, source)):
            counts[len(source), i].update(allowed)
            seen[len(source), i] += 1
    return sum(max(c.values()) / seen[key] for key, c in counts.items()) / len(counts)


def blind_per_source_denominator(sources, task):
    counts = defaultdict(Counter)
    for source in sources:
        for i, allowed in enumerate(expected_alignment(task, source)):
            counts[len(source), i].update(allowed)
    return sum(max(c.values()) for c in counts.values()) / sum(len(s) for s in sources[:1]) \
        / len(sources)


def blind_split_credit(sources, task):  # a tie of m positions gives each 1/m
    counts, rows = defaultdict(Counter), 0
    for source in sources:
        for i, allowed in enumerate(expected_alignment(task, source)):
            for j in allowed:
                counts[len(source), i][j] += 1 / len(allowed)
            rows += 1
    return sum(max(c.values()) for c in counts.values()) / rows


def blind_by_length_groups(sources, task):  # right: one length at a time
    rows, hits = 0, 0
    for n in sorted({len(s) for s in sources}):
        group = [expected_alignment(task, s) for s in sources if len(s) == n]
        for i in range(n):
            hits += max(Counter(j for allowed in group for j in allowed[i]).values())
        rows += n * len(group)
    return hits / rows


# ----------------------------------------------------------------------------- 08.1


def _angles(length, d_model, base, exponent=2):
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    i = torch.arange(d_model // 2, dtype=torch.float64)
    return pos / base ** (exponent * i / d_model)


def table_sin_cos_swapped(length, d_model, base=10000.0):
    angles = _angles(length, d_model, base)
    return torch.stack((angles.cos(), angles.sin()), -1).flatten(-2)


def table_exponent_i_over_d(length, d_model, base=10000.0):
    angles = _angles(length, d_model, base, exponent=1)
    return torch.stack((angles.sin(), angles.cos()), -1).flatten(-2)


def table_halves_not_interleaved(length, d_model, base=10000.0):
    angles = _angles(length, d_model, base)
    return torch.cat((angles.sin(), angles.cos()), -1)


def table_positions_from_one(length, d_model, base=10000.0):
    angles = _angles(length + 1, d_model, base)[1:]
    return torch.stack((angles.sin(), angles.cos()), -1).flatten(-2)


def table_ignores_base(length, d_model, base=10000.0):
    angles = _angles(length, d_model, 10000.0)
    return torch.stack((angles.sin(), angles.cos()), -1).flatten(-2)


def table_column_index_exponent(length, d_model, base=10000.0):  # pos / base^(j / d)
    j = torch.arange(d_model, dtype=torch.float64)
    angles = torch.arange(length, dtype=torch.float64)[:, None] / base ** (j / d_model)
    return torch.where(j % 2 == 0, angles.sin(), angles.cos())


def table_wraps_the_package(length, d_model, base=10000.0):
    from transformer_book.nn.positional import sinusoidal_encoding

    return sinusoidal_encoding(length, d_model, base, dtype=torch.float64)


def table_loop_over_positions(length, d_model, base=10000.0):  # 08.1 asks for no loops
    pe = torch.zeros(length, d_model, dtype=torch.float64)
    for pos in range(length):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / base ** (i / d_model))
            pe[pos, i + 1] = math.cos(pos / base ** (i / d_model))
    return pe


def table_from_python_lists(length, d_model, base=10000.0):  # a loop no torch call shows
    return torch.tensor([[math.sin(pos / base ** (j / d_model)) if j % 2 == 0
                          else math.cos(pos / base ** ((j - 1) / d_model))
                          for j in range(d_model)] for pos in range(length)],
                        dtype=torch.float64)


def table_exp_log_float32(length, d_model, base=10000.0):  # right: the div_term form
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32)
                         * (-math.log(base) / d_model))
    pe = torch.zeros(length, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


# ----------------------------------------------------------------------------- 08.2


def _omega(d_model, base, exponent=2):
    return 1.0 / base ** (exponent * torch.arange(d_model // 2, dtype=torch.float64) / d_model)


def _blocks(c, s, sign=1.0):
    rows = [torch.stack((torch.stack((ci, sign * si)), torch.stack((-sign * si, ci))))
            for ci, si in zip(c, s, strict=True)]
    return torch.block_diag(*rows)


def rotation_transposed(k, d_model, base=10000.0):  # M_{-k}: the inverse rotation
    angles = k * _omega(d_model, base)
    return _blocks(angles.cos(), angles.sin(), sign=-1.0)


def rotation_exponent_i_over_d(k, d_model, base=10000.0):
    angles = k * _omega(d_model, base, exponent=1)
    return _blocks(angles.cos(), angles.sin())


def rotation_integer_offset(k, d_model, base=10000.0):
    angles = int(k) * _omega(d_model, base)
    return _blocks(angles.cos(), angles.sin())


def rotation_halves_layout(k, d_model, base=10000.0):  # for a [sin | cos] table
    angles = k * _omega(d_model, base)
    c, s = torch.diag(angles.cos()), torch.diag(angles.sin())
    return torch.cat((torch.cat((c, s), 1), torch.cat((-s, c), 1)), 0)


def rotation_wraps_the_package(k, d_model, base=10000.0):
    from transformer_book.nn.positional import relative_offset_matrix

    return relative_offset_matrix(k, d_model, base)


def rotation_loop_of_blocks(k, d_model, base=10000.0):  # right: entry by entry
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        angle = k / base ** (2 * i / d_model)
        M[2 * i, 2 * i] = M[2 * i + 1, 2 * i + 1] = math.cos(angle)
        M[2 * i, 2 * i + 1] = math.sin(angle)
        M[2 * i + 1, 2 * i] = -math.sin(angle)
    return M


def rotation_float32(k, d_model, base=10000.0):  # right: float32 is another dtype
    angles = (k * _omega(d_model, base)).float()
    return _blocks(angles.cos(), angles.sin())


# ----------------------------------------------------------------------------- 09.1


def _decoder(y, memory, layer, mask, *, self_mask="causal", dropout_after_norm=False,
             residual_from_norm=False, memory_mask=True, swap_norms=False,
             pre_ln_output_norm=False, dropout_on_residual=False):
    norms = (layer.norm1, layer.norm2, layer.norm3)
    if swap_norms:
        norms = (layer.norm2, layer.norm1, layer.norm3)

    def sublayer(x, f, norm):
        if layer.norm_first:
            h = norm(x)
            out = (h if residual_from_norm else x) + layer.dropout(f(h))
            return norm(out) if pre_ln_output_norm else out
        if dropout_on_residual:
            return norm(layer.dropout(x + f(x)))
        if dropout_after_norm:
            return layer.dropout(norm(x + f(x)))
        return norm(x + layer.dropout(f(x)))

    t = y.shape[1]
    attend = {"causal": causal_mask(t), "strict": torch.ones(t, t).tril(-1).bool(),
              "upper": torch.ones(t, t).triu().bool()}[self_mask]
    y = sublayer(y, lambda h: layer.self_attn(h, h, h, mask=attend)[0], norms[0])
    y = sublayer(y, lambda h: layer.cross_attn(h, memory, memory,
                                               mask=mask if memory_mask else None)[0], norms[1])
    return sublayer(y, layer.ffn, norms[2])


def decoder_no_self_mask_diagonal(y, memory, layer, memory_mask):  # a position can't see itself
    return _decoder(y, memory, layer, memory_mask, self_mask="strict")


def decoder_mask_upper_triangle(y, memory, layer, memory_mask):  # sees the future, not the past
    return _decoder(y, memory, layer, memory_mask, self_mask="upper")


def decoder_dropout_after_norm(y, memory, layer, memory_mask):
    return _decoder(y, memory, layer, memory_mask, dropout_after_norm=True)


def decoder_residual_from_norm(y, memory, layer, memory_mask):
    return _decoder(y, memory, layer, memory_mask, residual_from_norm=True)


def decoder_no_memory_mask(y, memory, layer, memory_mask):
    return _decoder(y, memory, layer, memory_mask, memory_mask=False)


def decoder_norms_swapped(y, memory, layer, memory_mask):
    return _decoder(y, memory, layer, memory_mask, swap_norms=True)


def decoder_pre_ln_normalises_output(y, memory, layer, memory_mask):  # LN(x + f(LN(x)))
    return _decoder(y, memory, layer, memory_mask, pre_ln_output_norm=True)


def decoder_dropout_on_residual(y, memory, layer, memory_mask):  # LN(dropout(x + f(x)))
    return _decoder(y, memory, layer, memory_mask, dropout_on_residual=True)


def decoder_calls_the_class_forward(y, memory, layer, memory_mask):  # the forbidden shortcut
    return type(layer).forward(layer, y, memory, memory_mask)[0]


def decoder_explicit_tril(y, memory, layer, memory_mask):  # right: a hand-made causal mask
    return _decoder(y, memory, layer, memory_mask, self_mask="causal")


# ----------------------------------------------------------------------------- 09.2


def _count(config, *, tied=None, attention_bias=True, decoder_norms=3, position_tables=2,
           final_norm=None, ffn_biases=True):
    d, d_ff, vocab = config.d_model, config.d_ff, config.vocab_size
    attention = 4 * d * d + (4 * d if attention_bias else 0)
    ffn = 2 * d * d_ff + ((d_ff + d) if ffn_biases else 0)
    total = config.num_encoder_layers * (attention + ffn + 4 * d)
    total += config.num_decoder_layers * (2 * attention + ffn + decoder_norms * 2 * d)
    total += 4 * d if (config.final_norm if final_norm is None else final_norm) else 0
    tie = config.tie_embeddings if tied is None else tied
    total += (1 if tie else 3) * vocab * d + (vocab if config.generator_bias else 0)
    return total + (position_tables * config.max_len * d if config.positional == "learned"
                    else 0)


def count_always_tied(config):
    return _count(config, tied=True)


def count_without_attention_biases(config):
    return _count(config, attention_bias=False)


def count_two_norms_per_decoder_layer(config):
    return _count(config, decoder_norms=2)


def count_one_position_table(config):
    return _count(config, position_tables=1)


def count_always_final_norm(config):
    return _count(config, final_norm=True)


def count_builds_the_model(config):  # the shortcut 09.2 forbids ("without building it")
    from transformer_book.nn.transformer import Transformer, count_parameters

    with torch.device("meta"):
        return count_parameters(Transformer(config))


def count_by_parts(config):  # right: weights and biases counted separately
    d, f = config.d_model, config.d_ff
    layers = config.num_encoder_layers, config.num_decoder_layers
    weights = layers[0] * (4 * d * d + 2 * d * f) + layers[1] * (8 * d * d + 2 * d * f)
    biases = layers[0] * (4 * d + f + d) + layers[1] * (8 * d + f + d)
    norms = 2 * d * (2 * layers[0] + 3 * layers[1] + (2 if config.final_norm else 0))
    tables = (1 if config.tie_embeddings else 3) * config.vocab_size * d
    out_bias = config.vocab_size * int(config.generator_bias)
    learned = 2 * config.max_len * d * int(config.positional == "learned")
    return weights + biases + norms + tables + out_bias + learned


# ----------------------------------------------------------------------------- 10.1


def floor_spread_over_v_minus_1(eps, vocab_size):
    on, off = 1 - eps, eps / (vocab_size - 1)
    floor = -on * math.log(on) if on > 0 else 0.0
    return floor - (vocab_size - 1) * off * math.log(off) if off > 0 else floor


def floor_target_term_only(eps, vocab_size):
    on = 1 - eps + eps / vocab_size
    return -on * math.log(on)


def floor_in_bits(eps, vocab_size):
    on, off = 1 - eps + eps / vocab_size, eps / vocab_size
    return -on * math.log2(on) - ((vocab_size - 1) * off * math.log2(off) if off else 0.0)


def floor_log_of_zero(eps, vocab_size):  # forgets that 0 · log 0 is 0
    on, off = 1 - eps + eps / vocab_size, eps / vocab_size
    return -on * math.log(on) - (vocab_size - 1) * off * math.log(off)


def floor_uniform_entropy(eps, vocab_size):
    return eps * math.log(vocab_size)


def floor_target_without_its_share(eps, vocab_size):  # q(y) = 1 - eps: q sums to 1 - eps/V
    on, off = 1 - eps, eps / vocab_size
    return -on * math.log(on) - ((vocab_size - 1) * off * math.log(off) if off else 0.0)


def floor_with_entr(eps, vocab_size):  # right: the entropy of q, in torch
    q = torch.full((vocab_size,), eps / vocab_size, dtype=torch.float64)
    q[0] += 1 - eps
    return float(torch.special.entr(q).sum())


# ----------------------------------------------------------------------------- 10.2


def _adam(gradients, lrs, betas=(0.9, 0.98), eps=1e-9, *, correct=True, eps_inside=False,
          sign=-1.0, start=1):
    beta1, beta2 = betas
    m = v = 0.0
    out = []
    for t, (g, lr) in enumerate(zip(gradients.tolist(), lrs.tolist(), strict=True), start=start):
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        m_hat, v_hat = (m / (1 - beta1**t), v / (1 - beta2**t)) if correct else (m, v)
        denominator = math.sqrt(v_hat + eps) if eps_inside else math.sqrt(v_hat) + eps
        out.append(sign * lr * m_hat / denominator)
    return torch.tensor(out, dtype=torch.float64)


def adam_without_bias_correction(gradients, lrs, betas=(0.9, 0.98), eps=1e-9):
    return _adam(gradients, lrs, betas, eps, correct=False)


def adam_eps_inside_root(gradients, lrs, betas=(0.9, 0.98), eps=1e-9):
    return _adam(gradients, lrs, betas, eps, eps_inside=True)


def adam_ascends(gradients, lrs, betas=(0.9, 0.98), eps=1e-9):
    return _adam(gradients, lrs, betas, eps, sign=1.0)


def adam_steps_counted_from_two(gradients, lrs, betas=(0.9, 0.98), eps=1e-9):
    return _adam(gradients, lrs, betas, eps, start=2)


def adam_ignores_betas(gradients, lrs, betas=(0.9, 0.98), eps=1e-9):  # the paper's, always
    return _adam(gradients, lrs, (0.9, 0.98), eps)


def adam_lr_one_step_late(gradients, lrs, betas=(0.9, 0.98), eps=1e-9):  # lrs[t], not t - 1
    late = torch.cat([lrs[:1], lrs[:-1]])
    return _adam(gradients, late, betas, eps)


def adam_with_torch_optim(gradients, lrs, betas=(0.9, 0.98), eps=1e-9):  # torch's Adam inside
    weight = torch.nn.Parameter(torch.zeros((), dtype=torch.float64))
    optimizer = torch.optim.Adam([weight], lr=1.0, betas=betas, eps=eps)
    out = []
    for g, lr in zip(gradients.tolist(), lrs.tolist(), strict=True):
        optimizer.param_groups[0]["lr"] = lr
        before = weight.item()
        weight.grad = torch.tensor(g, dtype=torch.float64)
        optimizer.step()
        out.append(weight.item() - before)
    return torch.tensor(out, dtype=torch.float64)


def adam_vectorised(gradients, lrs, betas=(0.9, 0.98), eps=1e-9):  # right: no loop
    beta1, beta2 = betas
    steps = torch.arange(1, gradients.numel() + 1, dtype=torch.float64)
    lag = (steps[:, None] - steps[None, :]).clamp(min=0)  # t - s for s <= t
    below = steps[None, :] <= steps[:, None]
    m = ((1 - beta1) * beta1**lag * below) @ gradients
    v = ((1 - beta2) * beta2**lag * below) @ gradients**2
    m_hat, v_hat = m / (1 - beta1**steps), v / (1 - beta2**steps)
    return -lrs * m_hat / (v_hat.sqrt() + eps)


# ----------------------------------------------------------------------------- 11.1


def alpha_ratio_inverted(short_logp, short_len, long_logp, long_len):
    if long_logp >= short_logp:
        return 0.0
    if short_logp == 0.0:
        return math.inf
    return math.log(short_logp / long_logp) / math.log((5 + long_len) / (5 + short_len))


def alpha_without_the_five(short_logp, short_len, long_logp, long_len):
    if long_logp >= short_logp:
        return 0.0
    if short_logp == 0.0:
        return math.inf
    return math.log(long_logp / short_logp) / math.log(long_len / short_len)


def alpha_never_zero(short_logp, short_len, long_logp, long_len):  # forgets "already wins"
    if short_logp == 0.0:
        return math.inf
    return math.log(long_logp / short_logp) / math.log((5 + long_len) / (5 + short_len))


def alpha_certain_short_divides_by_zero(short_logp, short_len, long_logp, long_len):
    if long_logp >= short_logp:
        return 0.0
    return math.log(long_logp / short_logp) / math.log((5 + long_len) / (5 + short_len))


def alpha_penalty_multiplies(short_logp, short_len, long_logp, long_len):  # log P · lp
    if long_logp >= short_logp:
        return 0.0
    return math.inf


def alpha_by_bisection(short_logp, short_len, long_logp, long_len):  # right: search for it
    if long_logp >= short_logp:
        return 0.0
    if short_logp == 0.0:
        return math.inf

    def wins(alpha):  # |long| / lp(long) <= |short| / lp(short), in logs
        return (math.log(-long_logp) - alpha * math.log((5 + long_len) / 6)
                <= math.log(-short_logp) - alpha * math.log((5 + short_len) / 6))

    low, high = 0.0, 1.0
    while not wins(high):
        low, high = high, 2 * high
        if high > 1e6:
            return math.inf
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (low, middle) if wins(middle) else (middle, high)
    return high


# ----------------------------------------------------------------------------- 11.2


def _lp(length, alpha):
    return ((5 + length) / 6) ** alpha


def _beam(scores, logp, k, eos_id, t, alpha, max_len, finished_before, stop="exact", *,
          width=2, eos_alive=False, finish_len=1, bound_len=None, count_now=True,
          divide=True, obey_k_finished=True, finish_rank=None, penalise_bound=True):
    vocab = logp.shape[1]
    totals = (scores[:, None] + logp).flatten()
    top, index = totals.topk(min(width * k, totals.numel()))
    finished, live = [], []
    for rank, (score, i) in enumerate(zip(top.tolist(), index.tolist(), strict=True)):
        beam, token = divmod(i, vocab)
        if score == -math.inf:
            continue
        if token == eos_id and not eos_alive:
            if rank < (k if finish_rank is None else finish_rank):
                finished.append((score / (_lp(t + finish_len, alpha) if divide else 1.0), beam))
        elif len(live) < k:
            live.append((score, beam, token))
    now = [s for s, _ in finished] if count_now else []
    best = max([*finished_before, *now], default=-math.inf)
    bound_at = max_len + 1 if bound_len is None else bound_len(t, max_len)
    bound = max((s for s, _, _ in live), default=-math.inf)
    bound /= _lp(bound_at, alpha) if penalise_bound else 1.0
    done = best >= bound
    if stop == "k_finished" and obey_k_finished:
        done = done or len(finished_before) + len(finished) >= k
    return finished, live, done


def beam_keeps_eos_alive(*args):  # extends an ended hypothesis
    return _beam(*args, eos_alive=True)


def beam_top_k_only(*args):  # looks at k candidates, not 2k
    return _beam(*args, width=1)


def beam_finishes_eos_beyond_k(*args):  # an <eos> ranked k .. 2k - 1 finishes too
    return _beam(*args, finish_rank=2 * args[2])


def beam_bound_unpenalised(*args):  # compares with the best live log P itself
    return _beam(*args, penalise_bound=False)


def beam_bound_at_next_length(*args):  # the bound with lp(t + 1), not lp(max_len + 1)
    return _beam(*args, bound_len=lambda t, max_len: t + 1)


def beam_bound_at_max_len(*args):  # lp(max_len), one short
    return _beam(*args, bound_len=lambda t, max_len: max_len)


def beam_finish_length_t(*args):  # lp(t): forgets the <eos> just added
    return _beam(*args, finish_len=0)


def beam_unnormalised_finished(*args):
    return _beam(*args, divide=False)


def beam_ignores_this_steps_finished(*args):
    return _beam(*args, count_now=False)


def beam_ignores_k_finished(*args):
    return _beam(*args, obey_k_finished=False)


def beam_sorted_candidates(scores, logp, k, eos_id, t, alpha, max_len, finished_before,
                           stop="exact"):  # right: sort everything, then walk the 2k best
    vocab = logp.shape[1]
    candidates = sorted(((float(scores[w] + logp[w, v]), w, v) for w in range(logp.shape[0])
                         for v in range(vocab)), key=lambda c: -c[0])[: 2 * k]
    finished = [(s / _lp(t + 1, alpha), w) for rank, (s, w, v) in enumerate(candidates)
                if v == eos_id and rank < k and s > -math.inf]
    live = [(s, w, v) for s, w, v in candidates if v != eos_id and s > -math.inf][:k]
    best = max([*finished_before, *(s for s, _ in finished)], default=-math.inf)
    bound = max((s for s, _, _ in live), default=-math.inf) / _lp(max_len + 1, alpha)
    done = best >= bound or (stop == "k_finished"
                             and len(finished_before) + len(finished) >= k)
    return finished, live, done


# ----------------------------------------------------------------------------- 12.1


def _frozen(config, s, t, b, *, tied=None, memory_kv=True, attention_backward=True):
    f = transformer_flops(config, s, t, b)
    encoder_weights = f.encoder_projections + f.encoder_feed_forward
    if config.tie_embeddings if tied is None else tied:
        return 3 * f.total - encoder_weights
    kv = config.num_decoder_layers * 2 * (2 * b * s * config.d_model ** 2) if memory_kv else 0
    attention = f.encoder_attention if attention_backward else 0
    return 3 * f.total - 2 * (encoder_weights + attention) - kv


def frozen_nothing_frozen(config, src_len, tgt_len, batch):
    return 3 * transformer_flops(config, src_len, tgt_len, batch).total


def frozen_always_tied(config, src_len, tgt_len, batch):
    return _frozen(config, src_len, tgt_len, batch, tied=True)


def frozen_always_untied(config, src_len, tgt_len, batch):
    return _frozen(config, src_len, tgt_len, batch, tied=False)


def frozen_memory_still_needs_gradient(config, src_len, tgt_len, batch):
    return _frozen(config, src_len, tgt_len, batch, memory_kv=False)


def frozen_drops_all_weight_gradients_only(config, src_len, tgt_len, batch):
    f = transformer_flops(config, src_len, tgt_len, batch)
    return 3 * f.total - (f.encoder_projections + f.encoder_feed_forward + f.encoder_attention)


def frozen_forward_plus_backward(config, src_len, tgt_len, batch):  # right: pass by pass
    f = transformer_flops(config, src_len, tgt_len, batch)
    encoder = f.encoder_projections + f.encoder_feed_forward + f.encoder_attention
    decoder = f.total - encoder
    if config.tie_embeddings:  # ∂L/∂X everywhere, ∂L/∂W nowhere in the encoder
        backward = 2 * decoder + encoder + f.encoder_attention
    else:  # no backward below the memory; its K/V projections: ∂L/∂W only
        backward = 2 * decoder - config.num_decoder_layers * 2 * (
            2 * batch * src_len * config.d_model ** 2)
    return f.total + backward


# ----------------------------------------------------------------------------- 12.2


def _gpus(config, tokens, seq_len, chip, precision, mfu, floor, *, factor=1.0, use_mfu=True,
          rounding=math.ceil, extra=0):
    step = factor * training_flops(config, seq_len, seq_len, batch=tokens // seq_len)
    rate = peak_flops(chip, precision) * (mfu if use_mfu else 1.0)
    return max(1, int(rounding(step / (rate * floor)))) + extra


def gpus_forward_only(*args):
    return _gpus(*args, factor=1 / 3)


def gpus_at_peak(*args):
    return _gpus(*args, use_mfu=False)


def gpus_rounded_down(*args):
    return _gpus(*args, rounding=math.floor)


def gpus_strictly_below_the_floor(*args):  # one more than needed
    return _gpus(*args, extra=1)


def gpus_both_sides_counted_twice(config, tokens, seq_len, chip, precision, mfu, floor):
    return _gpus(config, 2 * tokens, seq_len, chip, precision, mfu, floor)


def gpus_by_counting(config, tokens_per_side, seq_len, device_name, precision, mfu,
                     floor_seconds):  # right: add GPUs until the arithmetic fits
    step = training_flops(config, seq_len, seq_len, batch=tokens_per_side // seq_len)
    k = max(1, math.floor(step / (peak_flops(device_name, precision) * mfu * floor_seconds)))
    while step / (k * peak_flops(device_name, precision) * mfu) > floor_seconds:
        k += 1
    while k > 1 and step / ((k - 1) * peak_flops(device_name, precision) * mfu) <= floor_seconds:
        k -= 1
    return k


# ----------------------------------------------------------------------------- 13.1


def params_without_biases(d_model, h, d_k):
    d_v = d_model // h
    return 2 * d_model * h * d_k + 2 * d_model * h * d_v


def params_values_with_d_k(d_model, h, d_k):
    return 4 * (d_model * h * d_k + h * d_k) - 3 * h * d_k + d_model


def params_ignore_d_k(d_model, h, d_k):
    return 4 * d_model * d_model + 4 * d_model


def params_full_width_q_k_biases(d_model, h, d_k):
    d_v = d_model // h
    return 2 * (d_model * h * d_k + d_model) + d_model * h * d_v + h * d_v + h * d_v * d_model \
        + d_model


def params_float_division(d_model, h, d_k):  # returns a float, not an int
    d_v = d_model / h
    return 2 * (d_model * h * d_k + h * d_k) + d_model * h * d_v + h * d_v + h * d_v * d_model \
        + d_model


def params_from_the_package_layer(d_model, h, d_k):  # builds the layer instead of a formula
    from transformer_book.analysis.ablation import restrict_key_size
    from transformer_book.nn.attention import MultiHeadAttention
    from transformer_book.nn.transformer import count_parameters

    module = MultiHeadAttention(d_model, h)
    return count_parameters(module) - restrict_key_size(module, d_k)


def params_per_head(d_model, h, d_k):  # right: one head at a time, then W^O
    d_v = d_model // h
    per_head = 2 * (d_model + 1) * d_k + (d_model + 1) * d_v
    return h * per_head + (h * d_v + 1) * d_model


# ----------------------------------------------------------------------------- 13.2


def ppl_counts_padding(logits, targets, pad_id=0):
    nll = -torch.log_softmax(logits, -1).gather(-1, targets[..., None]).squeeze(-1)
    return math.exp(float(nll.mean()))


def ppl_mean_over_sentences(logits, targets, pad_id=0):
    nll = -torch.log_softmax(logits, -1).gather(-1, targets[..., None]).squeeze(-1)
    keep = targets != pad_id
    per_sentence = (nll * keep).sum(-1) / keep.sum(-1).clamp(min=1)
    return math.exp(float(per_sentence[keep.any(-1)].mean()))


def ppl_softmax_over_time(logits, targets, pad_id=0):
    nll = -torch.log_softmax(logits, 1).gather(-1, targets[..., None]).squeeze(-1)
    keep = targets != pad_id
    return math.exp(float((nll * keep).sum() / keep.sum()))


def ppl_with_label_smoothing(logits, targets, pad_id=0):
    keep = targets != pad_id
    loss = F.cross_entropy(logits[keep], targets[keep], label_smoothing=0.1)
    return math.exp(float(loss))


def ppl_pad_id_ignored(logits, targets, pad_id=0):  # always drops id 0
    nll = -torch.log_softmax(logits, -1).gather(-1, targets[..., None]).squeeze(-1)
    keep = targets != 0
    return math.exp(float((nll * keep).sum() / keep.sum()))


def ppl_exp_of_sum(logits, targets, pad_id=0):
    nll = -torch.log_softmax(logits, -1).gather(-1, targets[..., None]).squeeze(-1)
    return math.exp(float((nll * (targets != pad_id)).sum()))


def ppl_cross_entropy_ignore_index(logits, targets, pad_id=0):  # right
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=pad_id)
    return math.exp(float(loss))


def ppl_logsumexp(logits, targets, pad_id=0):  # right: log Z minus the target logit
    keep = targets != pad_id
    chosen = logits.gather(-1, targets[..., None]).squeeze(-1)
    nll = (logits.logsumexp(-1) - chosen)[keep]
    return math.exp(float(nll.sum()) / int(keep.sum()))


# ----------------------------------------------------------------------------- the catalogue

WRONG = {
    "06.1": [split_heads_view_without_transpose, split_heads_strided_columns,
             split_heads_positive_dims, split_heads_first_attempt, split_heads_assumes_batch,
             split_heads_swaps_the_last_two, split_heads_permute],
    "06.2": [mha_scaled_by_d_model, mha_mask_after_softmax, mha_split_without_transpose,
             mha_merge_without_transpose, mha_keys_from_query, mha_first_attempt,
             mha_mask_inverted, mha_mask_over_queries, mha_split_with_the_query_length,
             mha_wraps_the_package_layer, mha_loop_over_heads],
    "07.1": [cross_unscaled, cross_scaled_by_d_v, cross_mask_after_softmax,
             cross_softmax_over_queries, cross_mask_over_queries],
    "07.2": [alignment_mean_of_fractions, alignment_counts_padded_rows, alignment_off_by_one,
             alignment_reversed_over_padded_width, alignment_argmax_over_outputs],
    "07.5": [blind_first_allowed_only, blind_ignores_length, blind_mean_over_slots,
             blind_per_source_denominator, blind_split_credit],
    "08.1": [table_sin_cos_swapped, table_exponent_i_over_d, table_halves_not_interleaved,
             table_positions_from_one, table_ignores_base, table_column_index_exponent,
             table_wraps_the_package, table_loop_over_positions],
    "08.2": [rotation_transposed, rotation_exponent_i_over_d, rotation_integer_offset,
             rotation_halves_layout, rotation_wraps_the_package],
    "09.1": [decoder_no_self_mask_diagonal, decoder_mask_upper_triangle,
             decoder_dropout_after_norm, decoder_residual_from_norm, decoder_no_memory_mask,
             decoder_norms_swapped, decoder_pre_ln_normalises_output,
             decoder_dropout_on_residual, decoder_calls_the_class_forward],
    "09.2": [count_always_tied, count_without_attention_biases,
             count_two_norms_per_decoder_layer, count_one_position_table,
             count_always_final_norm, count_builds_the_model],
    "10.1": [floor_spread_over_v_minus_1, floor_target_term_only, floor_in_bits,
             floor_log_of_zero, floor_uniform_entropy, floor_target_without_its_share],
    "10.2": [adam_without_bias_correction, adam_eps_inside_root, adam_ascends,
             adam_steps_counted_from_two, adam_ignores_betas, adam_lr_one_step_late,
             adam_with_torch_optim],
    "11.1": [alpha_ratio_inverted, alpha_without_the_five, alpha_never_zero,
             alpha_certain_short_divides_by_zero, alpha_penalty_multiplies],
    "11.2": [beam_keeps_eos_alive, beam_top_k_only, beam_finishes_eos_beyond_k,
             beam_bound_unpenalised, beam_bound_at_next_length,
             beam_bound_at_max_len, beam_finish_length_t, beam_unnormalised_finished,
             beam_ignores_this_steps_finished, beam_ignores_k_finished],
    "12.1": [frozen_nothing_frozen, frozen_always_tied, frozen_always_untied,
             frozen_memory_still_needs_gradient, frozen_drops_all_weight_gradients_only],
    "12.2": [gpus_forward_only, gpus_at_peak, gpus_rounded_down,
             gpus_strictly_below_the_floor, gpus_both_sides_counted_twice],
    "13.1": [params_without_biases, params_values_with_d_k, params_ignore_d_k,
             params_full_width_q_k_biases, params_float_division],
    "13.2": [ppl_counts_padding, ppl_mean_over_sentences, ppl_softmax_over_time,
             ppl_with_label_smoothing, ppl_pad_id_ignored, ppl_exp_of_sum],
}

RIGHT = {
    "06.1": [split_heads_chunks, split_heads_loop, split_heads_movedim],
    "06.2": [mha_einsum, mha_heads_in_the_batch],
    "07.1": [cross_large_negative_fill],
    "07.2": [alignment_vectorised],
    "07.5": [blind_by_length_groups],
    "08.1": [table_exp_log_float32],
    "08.2": [rotation_loop_of_blocks, rotation_float32],
    "09.1": [decoder_explicit_tril],
    "09.2": [count_by_parts],
    "10.1": [floor_with_entr],
    "10.2": [adam_vectorised],
    "11.1": [alpha_by_bisection],
    "11.2": [beam_sorted_candidates],
    "12.1": [frozen_forward_plus_backward],
    "12.2": [gpus_by_counting],
    "13.1": [params_per_head],
    "13.2": [ppl_cross_entropy_ignore_index, ppl_logsumexp],
}

# Shortcuts that their exercise's statement rules out and its checker does not detect; they
# pass today (once a checker catches one, move it into WRONG). 08.1's LoopOver counts torch
# calls, and a loop that builds Python lists makes none per position; 13.1 asks for "your
# formula", and nothing stops an answer from building the layer and counting it.
UNDETECTED = {
    "08.1": [table_from_python_lists],
    "13.1": [params_from_the_package_layer],
}

CHAPTERS = [f"{n:02d}" for n in range(6, 14)]


def _params(table):
    return [pytest.param(eid, f, id=f"{eid}-{f.__name__}") for eid, fs in table.items()
            for f in fs]


def test_the_catalogue_covers_every_exercise_of_chapters_06_to_13():
    load_all()
    registered = {eid for eid in REGISTRY if eid[:2] in CHAPTERS}
    assert registered == set(WRONG) == set(RIGHT)
    assert all(len(WRONG[eid]) >= 3 for eid in registered)


def test_answers_written_here_count_as_the_learners_own():
    assert foreign_origin(split_heads_chunks) is None
    assert foreign_origin(torch.softmax) is not None


@pytest.mark.parametrize(("exercise_id", "answer"), _params(WRONG))
def test_a_plausible_wrong_answer_fails_with_an_actionable_message(exercise_id, answer):
    result = run_check(exercise_id, answer)
    assert result.status == "failed", f"{answer.__name__} passed: {result.detail}"
    detail = result.detail
    if "which this exercise asks you" in detail:  # a forbidden shortcut, named with the rule
        assert "your function" in detail, detail
        return
    assert "for " in detail, detail  # the input it tried
    raised = "your function raised" in detail  # what it received is the error
    assert raised or ("expected" in detail and "received" in detail), detail
    shown = re.search(r"expected (.*?),? received (.*)", detail)
    assert raised or shown.group(1) != shown.group(2), f"they read the same: {detail}"


@pytest.mark.parametrize(("exercise_id", "answer"), _params(RIGHT))
def test_a_correct_answer_written_another_way_passes(exercise_id, answer):
    result = run_check(exercise_id, answer)
    assert result.passed, result.detail


@pytest.mark.parametrize(("exercise_id", "answer"), _params(UNDETECTED))
def test_a_forbidden_shortcut_is_not_detected_yet(exercise_id, answer):
    result = run_check(exercise_id, answer)
    assert result.passed, (f"{answer.__name__} now fails ({result.detail}): move it into "
                           "WRONG")
