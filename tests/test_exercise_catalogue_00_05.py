"""A catalogue of answers to every code exercise of chapters 00-05: plausible wrong answers
that must fail, each with a message that says what was tried and what was expected, and
legitimate alternatives (another formulation, another dtype, another way to the same
number) that must pass.

Each wrong answer is the mistake a learner is likely to make: an off-by-one, a transposed
index, the wrong axis, a forgotten scale, a shortcut the exercise forbids (a wrapper of
``torch.softmax``, a loop over the positions, autograd). The functions are defined here, in
a test module, which :func:`~transformer_book.course.exercises.core.foreign_origin` treats
as the learner's own (asserted below), so each is run and judged like a notebook's answer.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from fractions import Fraction

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from transformer_book.course.exercises.core import REGISTRY, foreign_origin, load_all, run_check
from transformer_book.nn.attention import AdditiveScore

FORBIDDEN = "which this exercise asks you not to"

# --------------------------------------------------------------------------------- 00.1 softmax


def softmax(x, dim=-1):
    shifted = x - x.max(dim=dim, keepdim=True).values
    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)


def softmax_unshifted(x, dim=-1):
    return x.exp() / x.exp().sum(dim=dim, keepdim=True)


def softmax_shift_by_mean(x, dim=-1):
    shifted = x - x.mean(dim=dim, keepdim=True)
    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)


def softmax_shift_by_min(x, dim=-1):
    shifted = x - x.min(dim=dim, keepdim=True).values
    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)


def softmax_global_max(x, dim=-1):  # one shift for the whole tensor, not one per row
    shifted = x - x.max()
    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)


def softmax_ignores_dim(x, dim=-1):
    return softmax(x, -1)


def softmax_divides_by_max(x, dim=-1):  # normalises by the largest exponential, not the sum
    shifted = (x - x.max(dim=dim, keepdim=True).values).exp()
    return shifted / shifted.amax(dim=dim, keepdim=True)


def softmax_wraps_torch(x, dim=-1):
    return torch.softmax(x, dim=dim)


def softmax_wraps_functional(x, dim=-1):
    return F.softmax(x, dim=dim)


def softmax_wraps_method(x, dim=-1):
    return x.softmax(dim)


def softmax_via_log_softmax(x, dim=-1):
    return torch.log_softmax(x, dim=dim).exp()


def softmax_via_module(x, dim=-1):
    return nn.Softmax(dim=dim)(x)


def softmax_amax(x, dim=-1):  # amax instead of max(...).values
    exps = torch.exp(x - torch.amax(x, dim=dim, keepdim=True))
    return exps / torch.sum(exps, dim=dim, keepdim=True)


def softmax_last_axis(x, dim=-1):  # move the axis to the end, work there, move it back
    moved = x.movedim(dim, -1)
    exps = (moved - moved.max(-1, keepdim=True).values).exp()
    return (exps / exps.sum(-1, keepdim=True)).movedim(-1, dim)


def softmax_in_float64(x, dim=-1):  # computes in float64 whatever the input, returns its dtype
    return softmax(x.double(), dim).to(x.dtype)


# ------------------------------------------------------------------------ 01.1 counterexample


def counterexample():
    return ("Ġn", "e", "w", "es", "t"), ("s", "t")


def counterexample_short():
    return ("ab", "c"), ("b", "c")


def counterexample_as_lists():
    return ["x", "yz", "w"], ["z", "w"]


def counterexample_overlap():  # the case the statement says the replacement handles
    return ("a", "a", "a"), ("a", "a")


def counterexample_single_characters():  # every symbol one character: both merges agree
    return ("s", "t", "o", "p"), ("s", "t")


def counterexample_with_spaces():
    return ("a b", "c"), ("b", "c")


def counterexample_three_symbols():
    return ("es", "t"), ("e", "s", "t")


def counterexample_text():
    return "es t"


# --------------------------------------------------------------------- 01.2 expected_padding


def expected_padding(lengths, batch_size):
    counts, total = Counter(lengths), len(lengths)
    expected_longest, below = 0.0, 0
    for level in range(1, max(lengths) + 1):
        expected_longest += 1 - (below / total) ** batch_size
        below += counts[level]
    return 1 - (sum(lengths) / total) / expected_longest


def expected_padding_pmf(lengths, batch_size):  # E[max] = Σ ℓ (F(ℓ)^B - F(ℓ-1)^B)
    total = len(lengths)
    cdf = [sum(length <= level for length in lengths) / total
           for level in range(max(lengths) + 1)]
    longest = sum(level * (cdf[level] ** batch_size - cdf[level - 1] ** batch_size)
                  for level in range(1, max(lengths) + 1))
    return 1 - (sum(lengths) / total) / longest


def expected_padding_exact(lengths, batch_size):  # exact rational arithmetic
    total = len(lengths)
    longest = sum(1 - Fraction(sum(length < level for length in lengths), total) ** batch_size
                  for level in range(1, max(lengths) + 1))
    return 1 - Fraction(sum(lengths), total) / longest


def expected_padding_tensor(lengths, batch_size):
    lengths = torch.tensor(lengths, dtype=torch.float64)
    levels = torch.arange(1, int(lengths.max()) + 1, dtype=torch.float64)
    below = (lengths[None, :] < levels[:, None]).double().mean(dim=1)
    return 1 - lengths.mean() / (1 - below**batch_size).sum()


def padding_ignores_batch_size(lengths, batch_size):  # every batch padded to the longest
    return 1 - sum(lengths) / len(lengths) / max(lengths)


def padding_one_draw_too_many(lengths, batch_size):
    return expected_padding(lengths, batch_size + 1)


def padding_cdf_off_by_one(lengths, batch_size):  # P(max >= ℓ) written 1 - F(ℓ)^B
    counts, total = Counter(lengths), len(lengths)
    longest, below = 0.0, 0
    for level in range(1, max(lengths) + 1):
        below += counts[level]
        longest += 1 - (below / total) ** batch_size
    return 1 - (sum(lengths) / total) / longest


def padding_distinct_lengths(lengths, batch_size):  # forgets how often each length occurs
    return expected_padding(sorted(set(lengths)), batch_size)


def padding_share_of_real_tokens(lengths, batch_size):  # the complement: real tokens' share
    return 1 - expected_padding(lengths, batch_size)


# ------------------------------------------------------------------- 02.1 stacked RNN forward


def stacked_rnn_forward(x, h0, layers):
    outputs, finals = x, []
    for k, (w_ih, w_hh, b_ih, b_hh) in enumerate(layers):
        h, states = h0[k], []
        for t in range(outputs.shape[1]):
            h = torch.tanh(outputs[:, t] @ w_ih.T + b_ih + h @ w_hh.T + b_hh)
            states.append(h)
        outputs = torch.stack(states, dim=1)
        finals.append(h)
    return outputs, torch.stack(finals)


def stacked_rnn_projects_first(x, h0, layers):  # all input projections in one product
    outputs, finals = x, []
    for k, (w_ih, w_hh, b_ih, b_hh) in enumerate(layers):
        projected = F.linear(outputs, w_ih, b_ih + b_hh)  # (B, L, H)
        h, states = h0[k], []
        for t in range(projected.shape[1]):
            h = torch.tanh(projected[:, t] + F.linear(h, w_hh))
            states.append(h)
        outputs = torch.stack(states, dim=1)
        finals.append(h)
    return outputs, torch.stack(finals)


def rnn_only_top_state(x, h0, layers):
    outputs, h_n = stacked_rnn_forward(x, h0, layers)
    return outputs, h_n[-1:].expand_as(h_n)


def rnn_first_h0_everywhere(x, h0, layers):  # every layer starts from layer 0's state
    return stacked_rnn_forward(x, h0[:1].expand_as(h0), layers)


def rnn_every_layer_reads_x(x, h0, layers):  # layer k reads x, not the states of layer k - 1
    outputs, finals = None, []
    for k, weights in enumerate(layers):
        outputs, h_n = stacked_rnn_forward(x, h0[k:k + 1], [weights])
        finals.append(h_n[0])
    return outputs, torch.stack(finals)


def rnn_without_tanh(x, h0, layers):
    outputs, finals = x, []
    for k, (w_ih, w_hh, b_ih, b_hh) in enumerate(layers):
        h, states = h0[k], []
        for t in range(outputs.shape[1]):
            h = outputs[:, t] @ w_ih.T + b_ih + h @ w_hh.T + b_hh
            states.append(h)
        outputs = torch.stack(states, dim=1)
        finals.append(h)
    return outputs, torch.stack(finals)


def rnn_outputs_only(x, h0, layers):
    return stacked_rnn_forward(x, h0, layers)[0]


def rnn_wraps_nn_rnn(x, h0, layers):
    hidden, inputs = layers[0][1].shape[0], x.shape[-1]
    rnn = nn.RNN(inputs, hidden, num_layers=len(layers), batch_first=True, dtype=x.dtype)
    with torch.no_grad():
        for k, weights in enumerate(layers):
            for name, weight in zip(("weight_ih", "weight_hh", "bias_ih", "bias_hh"), weights,
                                    strict=True):
                getattr(rnn, f"{name}_l{k}").copy_(weight)
        return rnn(x, h0)


def rnn_wraps_rnn_cell(x, h0, layers):
    outputs, finals = x, []
    for k, (w_ih, w_hh, b_ih, b_hh) in enumerate(layers):
        h, states = h0[k], []
        for t in range(outputs.shape[1]):
            h = torch.rnn_tanh_cell(outputs[:, t], h, w_ih, w_hh, b_ih, b_hh)
            states.append(h)
        outputs = torch.stack(states, dim=1)
        finals.append(h)
    return outputs, torch.stack(finals)


# -------------------------------------------------------------------------------- 02.2 GRU cell


def gru_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh):
    r_i, z_i, n_i = (x @ weight_ih.T + bias_ih).chunk(3, dim=-1)
    r_h, z_h, n_h = (h @ weight_hh.T + bias_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(r_i + r_h), torch.sigmoid(z_i + z_h)
    return (1 - z) * torch.tanh(n_i + r * n_h) + z * h


def gru_cell_six_matrices(x, h, weight_ih, weight_hh, bias_ih, bias_hh):
    hidden = h.shape[-1]

    def part(tensor, index):
        return tensor[index * hidden:(index + 1) * hidden]

    r = torch.sigmoid(F.linear(x, part(weight_ih, 0), part(bias_ih, 0))
                      + F.linear(h, part(weight_hh, 0), part(bias_hh, 0)))
    z = torch.sigmoid(F.linear(x, part(weight_ih, 1), part(bias_ih, 1))
                      + F.linear(h, part(weight_hh, 1), part(bias_hh, 1)))
    n = torch.tanh(F.linear(x, part(weight_ih, 2), part(bias_ih, 2))
                   + r * F.linear(h, part(weight_hh, 2), part(bias_hh, 2)))
    return n + z * (h - n)  # (1 - z) n + z h, rearranged


def gru_cell_lerp(x, h, weight_ih, weight_hh, bias_ih, bias_hh):  # the mix as torch.lerp
    r_i, z_i, n_i = F.linear(x, weight_ih, bias_ih).chunk(3, dim=-1)
    r_h, z_h, n_h = F.linear(h, weight_hh, bias_hh).chunk(3, dim=-1)
    z = torch.sigmoid(z_i + z_h)
    return torch.lerp(torch.tanh(n_i + torch.sigmoid(r_i + r_h) * n_h), h, z)


def gru_textbook_attempt(x, h, weight_ih, weight_hh, bias_ih, bias_hh):  # 02.2's first attempt
    r_x, z_x, n_x = (x @ weight_ih.T + bias_ih).chunk(3, dim=-1)
    w_hr, w_hz, w_hn = weight_hh.chunk(3)
    b_hr, b_hz, b_hn = bias_hh.chunk(3)
    r = torch.sigmoid(r_x + h @ w_hr.T + b_hr)
    z = torch.sigmoid(z_x + h @ w_hz.T + b_hz)
    return z * torch.tanh(n_x + (r * h) @ w_hn.T + b_hn) + (1 - z) * h


def gru_swapped_gates(x, h, weight_ih, weight_hh, bias_ih, bias_hh):  # rows read as [z; r; n]
    z_i, r_i, n_i = (x @ weight_ih.T + bias_ih).chunk(3, dim=-1)
    z_h, r_h, n_h = (h @ weight_hh.T + bias_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(r_i + r_h), torch.sigmoid(z_i + z_h)
    return (1 - z) * torch.tanh(n_i + r * n_h) + z * h


def gru_reset_before_product(x, h, weight_ih, weight_hh, bias_ih, bias_hh):  # Cho's W (r ⊙ h)
    r_i, z_i, n_i = (x @ weight_ih.T + bias_ih).chunk(3, dim=-1)
    r_h, z_h, _ = (h @ weight_hh.T + bias_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(r_i + r_h), torch.sigmoid(z_i + z_h)
    w_hn, b_hn = weight_hh.chunk(3)[2], bias_hh.chunk(3)[2]
    return (1 - z) * torch.tanh(n_i + (r * h) @ w_hn.T + b_hn) + z * h


def gru_swapped_interpolation(x, h, weight_ih, weight_hh, bias_ih, bias_hh):  # z n + (1 - z) h
    r_i, z_i, n_i = (x @ weight_ih.T + bias_ih).chunk(3, dim=-1)
    r_h, z_h, n_h = (h @ weight_hh.T + bias_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(r_i + r_h), torch.sigmoid(z_i + z_h)
    return z * torch.tanh(n_i + r * n_h) + (1 - z) * h


def gru_bias_outside_reset(x, h, weight_ih, weight_hh, bias_ih, bias_hh):  # r ⊙ (W h) + b_hn
    r_i, z_i, n_i = (x @ weight_ih.T + bias_ih).chunk(3, dim=-1)
    r_h, z_h, _ = (h @ weight_hh.T + bias_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(r_i + r_h), torch.sigmoid(z_i + z_h)
    n = torch.tanh(n_i + r * (h @ weight_hh.chunk(3)[2].T) + bias_hh.chunk(3)[2])
    return (1 - z) * n + z * h


def gru_wraps_nn_gru_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh):
    cell = nn.GRUCell(x.shape[-1], h.shape[-1], dtype=x.dtype)
    with torch.no_grad():
        for name, value in zip(("weight_ih", "weight_hh", "bias_ih", "bias_hh"),
                               (weight_ih, weight_hh, bias_ih, bias_hh), strict=True):
            getattr(cell, name).copy_(value)
        return cell(x, h)


def gru_wraps_torch_gru_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh):
    return torch.gru_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh)


# -------------------------------------------------------------------------- 03.1 causal_conv1d


def causal_conv1d(x, weight, bias, dilation=1):  # the chapter's: k shifted copies, one einsum
    k, length = weight.shape[-1], x.shape[1]
    padded = F.pad(x, (0, 0, (k - 1) * dilation, 0))
    taps = torch.stack([padded[:, j * dilation:j * dilation + length] for j in range(k)], dim=-1)
    y = torch.einsum("blck,ock->blo", taps, weight)
    return y if bias is None else y + bias


def causal_conv1d_torch(x, weight, bias, dilation=1):
    padded = F.pad(x.transpose(1, 2), ((weight.shape[-1] - 1) * dilation, 0))
    return F.conv1d(padded, weight, bias, dilation=dilation).transpose(1, 2)


def causal_conv1d_unfold(x, weight, bias, dilation=1):
    k = weight.shape[-1]
    padded = F.pad(x, (0, 0, (k - 1) * dilation, 0))  # (B, (k-1)d + L, C_in)
    windows = padded.unfold(1, (k - 1) * dilation + 1, 1)[..., ::dilation]  # (B, L, C_in, k)
    y = torch.einsum("blck,ock->blo", windows, weight)
    return y if bias is None else y + bias


def causal_conv1d_tap_sum(x, weight, bias, dilation=1):  # a loop over the k taps is fine
    k, length = weight.shape[-1], x.shape[1]
    padded = F.pad(x, (0, 0, (k - 1) * dilation, 0))
    y = sum(padded[:, j * dilation:j * dilation + length] @ weight[:, :, j].T for j in range(k))
    return y if bias is None else y + bias


def conv_centred(x, weight, bias, dilation=1):  # "same" padding: half of it on the right
    total = (weight.shape[-1] - 1) * dilation
    padded = F.pad(x.transpose(1, 2), (total // 2, total - total // 2))
    return F.conv1d(padded, weight, bias, dilation=dilation).transpose(1, 2)


def conv_padded_right(x, weight, bias, dilation=1):  # sees the future, not the past
    padded = F.pad(x.transpose(1, 2), (0, (weight.shape[-1] - 1) * dilation))
    return F.conv1d(padded, weight, bias, dilation=dilation).transpose(1, 2)


def conv_ignores_dilation(x, weight, bias, dilation=1):
    return causal_conv1d(x, weight, bias, 1)


def conv_flipped_kernel(x, weight, bias, dilation=1):  # tap j read at offset j·d back
    return causal_conv1d(x, weight.flip(-1), bias, dilation)


def conv_forgets_bias(x, weight, bias, dilation=1):
    return causal_conv1d(x, weight, None, dilation)


def conv_loop_over_positions(x, weight, bias, dilation=1):  # the chapter's loop, bias optional
    batch, length, _ = x.shape
    c_out, _, k = weight.shape
    y = torch.zeros(batch, length, c_out, dtype=x.dtype)
    for t in range(length):
        if bias is not None:
            y[:, t] = bias
        for j in range(k):
            source = t - (k - 1 - j) * dilation
            if source >= 0:
                y[:, t] += x[:, source] @ weight[:, :, j].T
    return y


def conv_one_window_per_position(x, weight, bias, dilation=1):  # a comprehension is a loop too
    k = weight.shape[-1]
    padded = F.pad(x, (0, 0, (k - 1) * dilation, 0))
    outputs = [torch.einsum("bck,ock->bo", padded[:, t:t + (k - 1) * dilation + 1:dilation]
                            .transpose(1, 2), weight) for t in range(x.shape[1])]
    y = torch.stack(outputs, dim=1)
    return y if bias is None else y + bias


# ------------------------------------------------------------------------- 03.2 bytenet_layers


def bytenet_layers(n, kernel_size, max_dilation):
    block = (kernel_size - 1) * (2 * max_dilation - 1)
    full, rest = divmod(n - 1, block)
    layers, reach, dilation = full * max_dilation.bit_length(), 0, 1
    while reach < rest:
        reach += (kernel_size - 1) * dilation
        dilation *= 2
        layers += 1
    return layers


def bytenet_walk(n, kernel_size, max_dilation):  # layer by layer, as the receptive field grows
    layers, seen, dilation = 0, 1, 1
    while seen < n:
        seen += (kernel_size - 1) * dilation
        dilation = 1 if dilation == max_dilation else 2 * dilation
        layers += 1
    return layers


def bytenet_as_tensor(n, kernel_size, max_dilation):
    return torch.tensor(bytenet_walk(n, kernel_size, max_dilation))


def bytenet_unlimited(n, kernel_size, max_dilation):  # forgets the cap: logarithmic
    layers, seen, dilation = 0, 1, 1
    while seen < n:
        seen, dilation, layers = seen + (kernel_size - 1) * dilation, 2 * dilation, layers + 1
    return layers


def bytenet_counts_inputs(n, kernel_size, max_dilation):  # a block adds k·r, not (k-1)(2r-1)
    return -(-(n - 1) // (kernel_size * max_dilation)) * max_dilation.bit_length()


def bytenet_at_least_one(n, kernel_size, max_dilation):  # n = 1 needs no layer
    return max(1, bytenet_layers(n, kernel_size, max_dilation))


def bytenet_n_not_n_minus_1(n, kernel_size, max_dilation):  # reaches n positions back
    return bytenet_walk(n + 1, kernel_size, max_dilation)


# ------------------------------------------------------------------------- 04.2 additive_score


def additive_score(q, k, W_q, W_k, v):
    return torch.tanh((q @ W_q).unsqueeze(-2) + (k @ W_k).unsqueeze(-3)) @ v


def additive_score_einsum(q, k, W_q, W_k, v):
    features = torch.tanh(torch.einsum("...qd,dh->...qh", q, W_q)[..., :, None, :]
                          + torch.einsum("...kd,dh->...kh", k, W_k)[..., None, :, :])
    return torch.einsum("...qkh,h->...qk", features, v)


def additive_score_query_loop(q, k, W_q, W_k, v):  # one query at a time: L_k h activations
    keys = k @ W_k  # (..., L_k, h)
    rows = [torch.tanh((q[..., i, :] @ W_q).unsqueeze(-2) + keys) @ v
            for i in range(q.shape[-2])]  # L_q x (..., L_k)
    return torch.stack(rows, dim=-2)


def score_separable(q, k, W_q, W_k, v):  # 04.2's first attempt: tanh of each part apart
    return ((torch.tanh(q @ W_q) @ v).unsqueeze(-1)
            + (torch.tanh(k @ W_k) @ v).unsqueeze(-2))


def score_pairs_i_i(q, k, W_q, W_k, v):  # no broadcast: query i against key i only
    return torch.tanh(q @ W_q + k @ W_k) @ v


def score_projection_transposed(q, k, W_q, W_k, v):  # W_q read as (h, d_q), like nn.Linear
    return additive_score(q, k, W_q.T, W_k.T, v)


def score_wraps_additive_score(q, k, W_q, W_k, v):  # the package's module, weights copied in
    module = AdditiveScore(W_q.shape[0], W_k.shape[0], W_q.shape[1]).to(q.dtype)
    with torch.no_grad():
        module.w_q.weight.copy_(W_q.T)
        module.w_k.weight.copy_(W_k.T)
        module.w_v.weight.copy_(v.unsqueeze(0))
        return module(q, k)


def score_transposed(q, k, W_q, W_k, v):  # (L_k, L_q) instead of (L_q, L_k)
    return additive_score(q, k, W_q, W_k, v).transpose(-1, -2)


def score_without_tanh(q, k, W_q, W_k, v):
    return ((q @ W_q).unsqueeze(-2) + (k @ W_k).unsqueeze(-3)) @ v


def score_sums_hidden(q, k, W_q, W_k, v):  # forgets v
    return torch.tanh((q @ W_q).unsqueeze(-2) + (k @ W_k).unsqueeze(-3)).sum(-1)


def score_tanh_last(q, k, W_q, W_k, v):  # tanh after the product with v
    return torch.tanh(((q @ W_q).unsqueeze(-2) + (k @ W_k).unsqueeze(-3)) @ v)


def score_one_matrix(q, k, W_q, W_k, v):  # W_q for the keys too
    return torch.tanh((q @ W_q).unsqueeze(-2) + (k @ W_q).unsqueeze(-3)) @ v


# ------------------------------------------------------------------------- 04.3 masked_softmax


def masked_softmax(scores, mask):
    weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
    return weights.masked_fill(~mask, 0.0)


def masked_softmax_nan_to_zero(scores, mask):  # -inf, then the fully masked rows' NaN to 0
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)


def masked_softmax_by_hand(scores, mask):  # exponentials times the mask, then normalise
    top = scores.masked_fill(~mask, float("-inf")).amax(dim=-1, keepdim=True)
    exps = (scores - top.nan_to_num(0.0, neginf=0.0)).exp() * mask
    total = exps.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, exps / total.clamp_min(torch.finfo(scores.dtype).tiny), 0.0)


def masked_with_minus_inf(scores, mask):  # a fully masked row becomes NaN
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def masked_after_softmax(scores, mask):  # zeroed after the softmax, never renormalised
    return torch.softmax(scores, dim=-1) * mask


def masked_inverted(scores, mask):  # True read as "masked"
    return masked_softmax(scores, ~mask)


def masked_rows_stay_uniform(scores, mask):  # forgets to zero the masked entries
    return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)


def masked_by_multiplying_scores(scores, mask):  # masked scores 0, not -inf
    return masked_softmax(scores * mask, torch.ones_like(mask))


# ---------------------------------------------------------------------------- 05.1 strength_for


def strength_for(weight, length, d_k):
    return math.sqrt(d_k) * math.log(weight * (length - 1) / (1 - weight))


def strength_for_logit(weight, length, d_k):  # logit(w) + ln(L - 1), scaled
    return math.sqrt(d_k) * (math.log(weight) - math.log1p(-weight) + math.log(length - 1))


def strength_for_float32(weight, length, d_k):  # a float32 tensor, not a float64 number
    w = torch.tensor(weight, dtype=torch.float32)
    return torch.sqrt(torch.tensor(float(d_k))) * torch.log(w * (length - 1) / (1 - w))


def strength_without_scale(weight, length, d_k):  # forgets √d_k
    return strength_for(weight, length, 1)


def strength_all_keys(weight, length, d_k):  # L, not L - 1, other keys
    return math.sqrt(d_k) * math.log(weight * length / (1 - weight))


def strength_odds_only(weight, length, d_k):  # as if there were one other key
    return math.sqrt(d_k) * math.log(weight / (1 - weight))


def strength_divides_by_scale(weight, length, d_k):  # / √d_k instead of · √d_k
    return math.log(weight * (length - 1) / (1 - weight)) / math.sqrt(d_k)


def strength_log10(weight, length, d_k):  # the wrong logarithm
    return math.sqrt(d_k) * math.log10(weight * (length - 1) / (1 - weight))


def strength_as_text(weight, length, d_k):
    return "six"


# ------------------------------------------------------------------------ 05.2 softmax_jacobian


def softmax_jacobian(scores):
    p = torch.softmax(scores, dim=-1)
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)


def jacobian_own_softmax_eye(scores):  # p_i (δ_ij - p_j) with an identity matrix
    p = softmax(scores, -1)
    eye = torch.eye(scores.shape[-1], dtype=scores.dtype)
    return p[..., :, None] * (eye - p[..., None, :])


def jacobian_complex_step(scores):  # derivatives without autograd: Im f(s + ih e_j) / h
    length, step = scores.shape[-1], 1e-30
    columns = []
    for j in range(length):
        bumped = scores.to(torch.complex128).clone()
        bumped[..., j] += 1j * step
        exps = (bumped - scores.amax(dim=-1, keepdim=True)).exp()
        columns.append((exps / exps.sum(dim=-1, keepdim=True)).imag / step)  # ∂p/∂s_j
    return torch.stack(columns, dim=-1)  # [..., i, j]


def jacobian_vmapped(scores):  # torch.func.vmap is not autograd
    def one(row):
        p = torch.softmax(row, -1)
        return torch.diag(p) - torch.outer(p, p)

    flat = scores.reshape(-1, scores.shape[-1])
    return torch.func.vmap(one)(flat).reshape(*scores.shape, scores.shape[-1])


def jacobian_negated(scores):  # p pᵀ - diag(p)
    return -softmax_jacobian(scores)


def jacobian_diagonal_only(scores):  # forgets the off-diagonal -p_i p_j
    return torch.diag_embed(torch.softmax(scores, -1))


def jacobian_diag_p_squared(scores):  # ∂p_i/∂s_i written p_i², not p_i (1 - p_i)
    p = torch.softmax(scores, dim=-1)
    return torch.diag_embed(p * p) - p.unsqueeze(-1) * p.unsqueeze(-2)


def jacobian_softmax_first_axis(scores):  # the softmax over dim 0, not the last
    p = torch.softmax(scores, dim=0)
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)


def jacobian_jacrev(scores):
    flat = scores.reshape(-1, scores.shape[-1])
    rows = torch.func.vmap(torch.func.jacrev(lambda row: torch.softmax(row, -1)))(flat)
    return rows.reshape(*scores.shape, scores.shape[-1])


def jacobian_jacfwd(scores):
    flat = scores.reshape(-1, scores.shape[-1])
    rows = torch.func.vmap(torch.func.jacfwd(lambda row: torch.softmax(row, -1)))(flat)
    return rows.reshape(*scores.shape, scores.shape[-1])


def jacobian_autograd_grad(scores):
    scores = scores.detach().requires_grad_(True)
    p = torch.softmax(scores, dim=-1)
    return torch.stack([torch.autograd.grad(p[..., i].sum(), scores, retain_graph=True)[0]
                        for i in range(p.shape[-1])], dim=-2)


def jacobian_backward(scores):
    rows = []
    for i in range(scores.shape[-1]):
        leaf = scores.clone()
        leaf.requires_grad = True
        torch.softmax(leaf, dim=-1)[..., i].sum().backward()
        rows.append(leaf.grad)
    return torch.stack(rows, dim=-2)


def jacobian_autograd_functional(scores):
    flat = scores.reshape(-1, scores.shape[-1])
    rows = [torch.autograd.functional.jacobian(lambda row: torch.softmax(row, -1), row)
            for row in flat]
    return torch.stack(rows).reshape(*scores.shape, scores.shape[-1])


# ------------------------------------------------------------------------------ 05.3 depends_on


def depends_on(attend, x):
    x = x.detach().clone().requires_grad_(True)
    out = attend(x)
    rows = [torch.autograd.grad(out[i].sum(), x, retain_graph=True)[0].ne(0).any(dim=-1)
            for i in range(out.shape[0])]
    return torch.stack(rows)


def depends_on_full_jacobian(attend, x):
    jacobian = torch.autograd.functional.jacobian(attend, x)  # (L, d, L, d)
    return jacobian.ne(0).any(dim=3).any(dim=1)


def depends_on_jacrev(attend, x):  # torch.func's Jacobian, (L, d, L, d)
    return torch.func.jacrev(attend)(x).ne(0).any(dim=3).any(dim=1)


def depends_on_reads_the_mask(attend, x):  # trusts the code instead of measuring
    return torch.ones(x.shape[0], x.shape[0], dtype=torch.bool).tril()


def depends_on_transposed(attend, x):
    return depends_on(attend, x).T


def depends_on_as_floats(attend, x):
    return depends_on(attend, x).float()


def depends_on_whole_output(attend, x):  # one backward pass through the sum of all outputs
    x = x.detach().clone().requires_grad_(True)
    grad = torch.autograd.grad(attend(x).sum(), x)[0].ne(0).any(dim=-1)  # (L,)
    return grad.expand(x.shape[0], -1)


def depends_on_one_feature(attend, x):  # finite differences on the first feature only
    base = attend(x)
    columns = []
    for j in range(x.shape[0]):
        changed = x.clone()
        changed[j, 0] += 1.0
        columns.append((attend(changed) != base).any(dim=-1))
    return torch.stack(columns, dim=0)  # [j, i]: transposed as well


# ------------------------------------------------------------------------------ the catalogue

RIGHT = {
    "00.1": [softmax, softmax_amax, softmax_last_axis, softmax_in_float64],
    "01.1": [counterexample, counterexample_short, counterexample_as_lists],
    "01.2": [expected_padding, expected_padding_pmf, expected_padding_exact,
             expected_padding_tensor],
    "02.1": [stacked_rnn_forward, stacked_rnn_projects_first],
    "02.2": [gru_cell, gru_cell_six_matrices, gru_cell_lerp],
    "03.1": [causal_conv1d, causal_conv1d_torch, causal_conv1d_unfold, causal_conv1d_tap_sum],
    "03.2": [bytenet_layers, bytenet_walk, bytenet_as_tensor],
    "04.2": [additive_score, additive_score_einsum, additive_score_query_loop],
    "04.3": [masked_softmax, masked_softmax_nan_to_zero, masked_softmax_by_hand],
    "05.1": [strength_for, strength_for_logit, strength_for_float32],
    "05.2": [softmax_jacobian, jacobian_own_softmax_eye, jacobian_complex_step,
             jacobian_vmapped],
    "05.3": [depends_on, depends_on_full_jacobian, depends_on_jacrev],
}

VALUES = r"for .+, (at index \(.*\) expected .+, received .+|expected .+, received .+)"
NOT_FINITE = r"for .+, expected finite numbers, received (nan|inf|-inf) at index"
RAISED = r"for .+, your function raised \w+"
# (exercise, wrong answer, what its message must say, the mistake)
WRONG = [
    ("00.1", softmax_unshifted, NOT_FINITE, "no-shift-overflows"),
    ("00.1", softmax_shift_by_mean, NOT_FINITE, "shift-by-mean"),
    ("00.1", softmax_shift_by_min, NOT_FINITE, "shift-by-min"),
    ("00.1", softmax_global_max, NOT_FINITE, "one-shift-for-the-whole-tensor"),
    ("00.1", softmax_ignores_dim, VALUES, "ignores-dim"),
    ("00.1", softmax_divides_by_max, VALUES, "divides-by-max-not-sum"),
    ("00.1", softmax_wraps_torch, "calls torch.softmax, " + FORBIDDEN, "wraps-torch.softmax"),
    ("00.1", softmax_wraps_functional, "calls torch.nn.functional.softmax, " + FORBIDDEN,
     "wraps-F.softmax"),
    ("00.1", softmax_wraps_method, "calls torch.Tensor.softmax, " + FORBIDDEN,
     "wraps-Tensor.softmax"),
    ("00.1", softmax_via_log_softmax, "calls torch.log_softmax, " + FORBIDDEN,
     "log_softmax-then-exp"),
    ("00.1", softmax_via_module, "calls torch.nn.functional.softmax, " + FORBIDDEN,
     "nn.Softmax-module"),
    ("01.1", counterexample_overlap, r"both merges give .*: not a counterexample",
     "overlapping-pair"),
    ("01.1", counterexample_single_characters, r"both merges give .*: not a counterexample",
     "single-character-symbols"),
    ("01.1", counterexample_with_spaces, r"should be .* without spaces .*, received",
     "symbol-with-a-space"),
    ("01.1", counterexample_three_symbols, r"pair should hold two symbols, received 3",
     "pair-of-three"),
    ("01.1", counterexample_text, r"expected a tuple \(symbols, pair\), received 'es t'",
     "a-string-not-a-tuple"),
    ("01.2", padding_ignores_batch_size, VALUES, "ignores-batch-size"),
    ("01.2", padding_one_draw_too_many, VALUES, "batch-size-off-by-one"),
    # all lengths 1 (one fresh case in 60) make its E[max] zero: it divides by zero
    ("01.2", padding_cdf_off_by_one, f"({RAISED}|{VALUES})", "cdf-off-by-one"),
    ("01.2", padding_distinct_lengths, VALUES, "distinct-lengths-only"),
    ("01.2", padding_share_of_real_tokens, VALUES, "share-of-real-tokens"),
    ("02.1", rnn_only_top_state, "h_n for " + VALUES[4:], "h_n-of-the-top-layer-only"),
    ("02.1", rnn_first_h0_everywhere, "h_n for |outputs for ", "layer-0-h0-for-every-layer"),
    ("02.1", rnn_every_layer_reads_x, f"({RAISED}|outputs for )", "every-layer-reads-x"),
    ("02.1", rnn_without_tanh, "outputs for " + VALUES[4:], "forgets-tanh"),
    ("02.1", rnn_outputs_only, r"for .+, expected a pair \(outputs, h_n\), received Tensor",
     "returns-outputs-only"),
    ("02.1", rnn_wraps_nn_rnn, "calls torch.rnn_tanh, " + FORBIDDEN, "wraps-nn.RNN"),
    ("02.1", rnn_wraps_rnn_cell, "calls torch.rnn_tanh_cell, " + FORBIDDEN,
     "wraps-torch.rnn_tanh_cell"),
    ("02.2", gru_textbook_attempt, VALUES, "the-exercise's-first-attempt"),
    ("02.2", gru_swapped_gates, VALUES, "gates-read-as-z-r-n"),
    ("02.2", gru_reset_before_product, VALUES, "reset-inside-the-product"),
    ("02.2", gru_swapped_interpolation, VALUES, "z-n-plus-1-minus-z-h"),
    ("02.2", gru_bias_outside_reset, VALUES, "b_hn-outside-the-reset"),
    ("02.2", gru_wraps_nn_gru_cell, "calls torch.gru_cell, " + FORBIDDEN, "wraps-nn.GRUCell"),
    ("02.2", gru_wraps_torch_gru_cell, "calls torch.gru_cell, " + FORBIDDEN,
     "wraps-torch.gru_cell"),
    ("03.1", conv_centred, VALUES, "centred-padding"),
    ("03.1", conv_padded_right, VALUES, "padded-on-the-right"),
    ("03.1", conv_ignores_dilation, VALUES, "ignores-dilation"),
    ("03.1", conv_flipped_kernel, VALUES, "flipped-kernel"),
    ("03.1", conv_forgets_bias, VALUES, "forgets-bias"),
    ("03.1", conv_loop_over_positions,
     r"makes \d+ torch calls at L = 12 and \d+ at L = 36: it loops over the L positions, "
     r"which this exercise asks you not to do", "the-chapter's-loop-over-L"),
    ("03.1", conv_one_window_per_position, r"it loops over the L positions, which this "
     r"exercise asks you not to do", "one-einsum-per-position"),
    ("03.2", bytenet_unlimited, VALUES, "forgets-the-dilation-cap"),
    ("03.2", bytenet_counts_inputs, VALUES, "a-block-adds-k-r"),
    ("03.2", bytenet_at_least_one, VALUES, "n-1-needs-one-layer"),
    ("03.2", bytenet_n_not_n_minus_1, VALUES, "n-positions-back-not-n-1"),
    ("04.2", score_separable, VALUES, "the-exercise's-first-attempt"),
    # the first case has L_q = 3 != L_k = 5 and d_q = 2 != h = 6, whatever the draws
    ("04.2", score_pairs_i_i, r"for q of shape \(3, 2\), k of shape \(5, 4\) and hidden size "
     r"6, your function raised RuntimeError", "pairs-i-i-only"),
    ("04.2", score_projection_transposed, r"for q of shape \(3, 2\), .* your function raised "
     r"RuntimeError", "projection-read-as-out-in"),
    ("04.2", score_wraps_additive_score, r"your function raised RuntimeError: this exercise "
     r"writes the additive score itself", "wraps-AdditiveScore"),
    ("04.2", score_transposed, r"for q of shape \(3, 2\), k of shape \(5, 4\) and hidden size "
     r"6, expected shape \(3, 5\), received shape \(5, 3\)", "transposed-L_k-L_q"),
    ("04.2", score_without_tanh, VALUES, "forgets-tanh"),
    ("04.2", score_sums_hidden, VALUES, "sums-instead-of-v"),
    ("04.2", score_tanh_last, VALUES, "tanh-after-v"),
    ("04.2", score_one_matrix, f"({RAISED}|{VALUES})", "W_q-for-the-keys"),
    ("04.3", masked_with_minus_inf, NOT_FINITE, "minus-inf-gives-NaN-rows"),
    ("04.3", masked_after_softmax, VALUES, "zeroed-after-softmax"),
    ("04.3", masked_inverted, VALUES, "True-read-as-masked"),
    ("04.3", masked_rows_stay_uniform, VALUES, "masked-row-stays-uniform"),
    ("04.3", masked_by_multiplying_scores, VALUES, "scores-times-mask"),
    ("05.1", strength_without_scale, r"for .+, your strength .+ gives the matching key weight "
     r".+, expected .+ \(strength .+\)", "forgets-sqrt-d_k"),
    ("05.1", strength_all_keys, r"your strength .+ gives .+, expected", "L-not-L-1"),
    ("05.1", strength_odds_only, r"your strength .+ gives .+, expected", "odds-only"),
    ("05.1", strength_divides_by_scale, r"your strength .+ gives .+, expected",
     "divides-by-sqrt-d_k"),
    ("05.1", strength_log10, r"your strength .+ gives .+, expected", "log10-not-ln"),
    ("05.1", strength_as_text, r"for .+, expected a finite number, received 'six'",
     "returns-text"),
    ("05.2", jacobian_negated, VALUES, "negated"),
    ("05.2", jacobian_diagonal_only, VALUES, "diagonal-only"),
    ("05.2", jacobian_diag_p_squared, VALUES, "p-squared-on-the-diagonal"),
    ("05.2", jacobian_softmax_first_axis, VALUES, "softmax-over-dim-0"),
    ("05.2", jacobian_jacrev, r"uses autograd \(it runs under a torch.func grad transform.*"
     + FORBIDDEN, "torch.func.jacrev"),
    ("05.2", jacobian_jacfwd, r"uses autograd \(it runs under a torch.func jvp transform.*"
     + FORBIDDEN, "torch.func.jacfwd"),
    ("05.2", jacobian_autograd_grad, r"uses autograd \(it calls .*torch.autograd.grad.*"
     + FORBIDDEN, "torch.autograd.grad"),
    ("05.2", jacobian_backward, r"uses autograd \(it calls .*torch.Tensor.backward.*"
     + FORBIDDEN, "Tensor.backward"),
    ("05.2", jacobian_autograd_functional, "uses autograd .*" + FORBIDDEN,
     "torch.autograd.functional.jacobian"),
    ("05.3", depends_on_reads_the_mask, VALUES, "reads-the-mask-off-the-code"),
    ("05.3", depends_on_transposed, VALUES, "transposed"),
    ("05.3", depends_on_as_floats, r"for .+, expected a boolean tensor, received torch.float32",
     "floats-not-booleans"),
    ("05.3", depends_on_whole_output, VALUES, "one-backward-through-all-outputs"),
    ("05.3", depends_on_one_feature, VALUES, "first-feature-only-and-transposed"),
]


def _all_answers():
    return [f for answers in RIGHT.values() for f in answers] + [w[1] for w in WRONG]


def test_the_catalogue_covers_every_code_exercise_of_chapters_00_to_05():
    load_all()
    ids = sorted(key for key in REGISTRY if key[:2] in {"00", "01", "02", "03", "04", "05"})
    assert len(ids) == 12, ids
    assert sorted(RIGHT) == ids
    wrong = Counter(exercise_id for exercise_id, *_ in WRONG)
    assert sorted(wrong) == ids
    assert all(wrong[i] >= 3 and len(RIGHT[i]) >= 1 for i in ids), (wrong, RIGHT)


def test_answers_written_here_count_as_the_learners_own():
    """A test module is not a library: its functions are run, not refused unseen."""
    assert all(foreign_origin(answer) is None for answer in _all_answers())


@pytest.mark.parametrize(("exercise_id", "answer"),
                         [pytest.param(i, f, id=f"{i}-{f.__name__}") for i, fs in RIGHT.items()
                          for f in fs])
def test_a_legitimate_answer_passes(exercise_id, answer):
    result = run_check(exercise_id, answer)
    assert result.passed, result.message


@pytest.mark.parametrize(("exercise_id", "answer", "says"),
                         [pytest.param(i, f, says, id=f"{i}-{mistake}")
                          for i, f, says, mistake in WRONG])
def test_a_wrong_answer_fails_saying_what_was_tried_and_what_was_expected(exercise_id, answer,
                                                                         says):
    result = run_check(exercise_id, answer)
    assert result.status == "failed", result.message
    title = REGISTRY[exercise_id].title
    assert result.detail.startswith(f"{title}: "), result.detail
    assert re.search(says, result.detail), result.detail
    if FORBIDDEN in says or "asks you not to" in says:  # the rule's advice follows
        advice = result.detail.split("asks you not to ", 1)[1].split(": ", 1)[1]
        assert len(advice) > 20, result.detail
    assert "Traceback" not in result.message


def test_check_prints_one_wrapped_verdict_for_a_forbidden_shortcut(capsys):
    from transformer_book.course.exercises.core import LINE_WIDTH, check

    check("00.1", softmax_wraps_torch)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("✗ Exercise 00.1 failed: softmax: your function calls "
                               "torch.softmax, which")
    assert all(len(line) <= LINE_WIDTH for line in lines)
    assert all(line.startswith("  ") for line in lines[1:]) and len(lines) <= 4


def test_the_rules_leave_the_global_rng_and_grad_mode_alone():
    torch.manual_seed(7)
    before = torch.get_rng_state()
    for exercise_id, answer in (("03.1", conv_loop_over_positions), ("05.2", jacobian_jacrev),
                                ("00.1", softmax_wraps_torch), ("03.1", causal_conv1d)):
        run_check(exercise_id, answer)
    assert torch.equal(before, torch.get_rng_state())
    assert torch.is_grad_enabled()
    assert torch.overrides._get_current_function_mode_stack() == []
