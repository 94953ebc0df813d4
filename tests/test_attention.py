"""Tests of transformer_book.nn.attention: scores, masks, attention, multi-head attention."""

from __future__ import annotations

import math
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_book.baselines.pooling import NadarayaWatson, attention_pooling
from transformer_book.nn import attention
from transformer_book.nn.attention import (
    AdditiveScore,
    MultiHeadAttention,
    causal_mask,
    dot_score,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
    scaled_dot_score,
)
from transformer_book.util.validation import BookError

F64 = torch.float64
SETTINGS = settings(max_examples=30, deadline=None)


def randn(*shape: int, seed: int = 0, requires_grad: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64).requires_grad_(requires_grad)


def random_mask(*shape: int, seed: int, keep_one: bool = True) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 1)
    mask = torch.rand(*shape, generator=g) < 0.6
    if keep_one:  # every query sees at least one key
        mask[..., 0] = True
    return mask


def pair(d_model: int = 16, heads: int = 4, bias: bool = True, seed: int = 0):
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(d_model, heads, bias=bias, batch_first=True).to(F64).eval()
    return ref, MultiHeadAttention.from_torch(ref).eval()


# --------------------------------------------------------------------------- pooling


def test_attention_pooling_is_a_weighted_average() -> None:
    keys = torch.linspace(0, 5, 50, dtype=F64)
    values = torch.sin(keys)
    queries = torch.tensor([0.5, 2.5, 4.0], dtype=F64)
    out, weights = attention_pooling(queries, keys, values, bandwidth=0.5)
    assert out.shape == (3,) and weights.shape == (3, 50)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, dtype=F64))
    diffs = queries[:, None] - keys[None]
    expected = torch.softmax(-(diffs**2) / (2 * 0.25), dim=-1)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out, expected @ values)
    # a narrow kernel recovers the nearest neighbour; vector values work too
    out, _ = attention_pooling(keys[[3, 40]], keys, torch.stack([values, 2 * values], 1), 1e-3)
    torch.testing.assert_close(out, torch.stack([values, 2 * values], 1)[[3, 40]])


def test_nadaraya_watson_module_learns_its_width() -> None:
    keys = torch.linspace(0, 5, 40, dtype=F64)
    values = torch.sin(keys)
    model = NadarayaWatson(init_w=0.5).to(F64)
    out, _ = model(keys, keys, values)
    torch.testing.assert_close(out, attention_pooling(keys, keys, values, bandwidth=2.0)[0])
    out.sub(values).pow(2).sum().backward()
    assert model.w.grad is not None and torch.isfinite(model.w.grad)


def test_attention_pooling_rejects_bad_input() -> None:
    x = torch.zeros(3, dtype=F64)
    with pytest.raises(ValueError, match=r"bandwidth: expected a (finite|positive) number"):
        attention_pooling(x, x, x, bandwidth=0)
    with pytest.raises(ValueError, match=r"values: expected 3 rows"):
        attention_pooling(x, x, torch.zeros(4))
    with pytest.raises(ValueError, match=r"queries: expected a 1-D tensor"):
        attention_pooling(torch.zeros(2, 2), x, x)


# --------------------------------------------------------------------------- scores


def test_scores() -> None:
    q, k = randn(2, 5, 8, seed=1), randn(2, 7, 8, seed=2)
    torch.testing.assert_close(dot_score(q, k), torch.einsum("bqd,bkd->bqk", q, k))
    torch.testing.assert_close(scaled_dot_score(q, k), dot_score(q, k) / math.sqrt(8))
    additive = AdditiveScore(8, 6, hidden=10).to(F64)
    kk = randn(2, 7, 6, seed=3)
    scores = additive(q, kk)
    assert scores.shape == (2, 5, 7)
    manual = torch.stack([
        torch.stack([additive.w_v(torch.tanh(additive.w_q(q[b, i]) + additive.w_k(kk[b, j])))[0]
                     for j in range(7)]) for b in range(2) for i in range(5)
    ]).view(2, 5, 7)
    torch.testing.assert_close(scores, manual)


def test_scores_reject_bad_input() -> None:
    with pytest.raises(ValueError, match=r"k: expected last dimension d_k=8 \(as q\)"):
        dot_score(randn(5, 8), randn(5, 4))
    with pytest.raises(ValueError, match=r"k: expected batch dimensions broadcastable"):
        dot_score(randn(2, 5, 8), randn(3, 5, 8))
    with pytest.raises(ValueError, match=r"k: expected shape \(\.\.\., L_k, 6\)"):
        AdditiveScore(8, 6, 4).to(F64)(randn(5, 8), randn(5, 8))
    with pytest.raises(ValueError, match=r"hidden: expected an integer >= 1"):
        AdditiveScore(8, 6, 0)


# --------------------------------------------------------------------------- masks


def test_padding_and_causal_masks() -> None:
    ids = torch.tensor([[5, 6, 0], [7, 0, 0]])
    mask = padding_mask(ids, pad_id=0)
    assert mask.shape == (2, 1, 1, 3) and mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]
    c = causal_mask(3)
    assert c.tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    combined = mask & c  # broadcasts to (B, 1, L, L), then against (B, h, L, L)
    assert combined.shape == (2, 1, 3, 3)
    q = randn(2, 4, 3, 8)
    _, w = scaled_dot_product_attention(q, q, q, combined)
    assert (w[0, :, :, 2] == 0).all() and (w[1, :, :, 1:] == 0).all()
    assert (w.triu(1) == 0).all()


def test_masks_reject_bad_input() -> None:
    with pytest.raises(ValueError, match=r"ids: expected an integer tensor"):
        padding_mask(torch.zeros(2, 3), 0)
    with pytest.raises(ValueError, match=r"ids: expected a 2-D tensor"):
        padding_mask(torch.zeros(3, dtype=torch.long), 0)
    with pytest.raises(ValueError, match=r"length: expected an integer >= 1, received 0"):
        causal_mask(0)


# --------------------------------------------------------------------------- scaled dot-product


shapes = st.tuples(
    st.integers(1, 3), st.integers(1, 3), st.integers(1, 6), st.integers(1, 6),
    st.integers(1, 8), st.integers(1, 5),
)


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_sdpa_rows_sum_to_one_and_masked_keys_get_zero(shape, seed) -> None:
    b, h, lq, lk, dk, dv = shape
    q, k, v = randn(b, h, lq, dk, seed=seed), randn(b, h, lk, dk, seed=seed + 1), randn(
        b, h, lk, dv, seed=seed + 2)
    mask = random_mask(b, 1, lq, lk, seed=seed)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == (b, h, lq, dv) and w.shape == (b, h, lq, lk)
    torch.testing.assert_close(w.sum(-1), torch.ones(b, h, lq, dtype=F64))
    assert (w.masked_select(~mask.expand_as(w)) == 0).all()
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected)


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_sdpa_matches_torch_without_mask(shape, seed) -> None:
    b, h, lq, lk, dk, dv = shape
    q, k, v = randn(b, h, lq, dk, seed=seed), randn(b, h, lk, dk, seed=seed + 1), randn(
        b, h, lk, dv, seed=seed + 2)
    out, w = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(w, torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dk), -1))


def test_sdpa_fully_masked_rows_are_zero_with_finite_gradients() -> None:
    q, k, v = (randn(2, 3, 4, seed=s, requires_grad=True) for s in range(3))
    mask = torch.ones(2, 3, 3, dtype=torch.bool)
    mask[0, 1] = False  # query 1 of batch 0 sees nothing
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert (w[0, 1] == 0).all() and (out[0, 1] == 0).all()
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    nothing = torch.zeros(2, 2, dtype=torch.bool)
    torch.testing.assert_close(masked_softmax(torch.zeros(2, 2), nothing), torch.zeros(2, 2))


def test_sdpa_gradcheck() -> None:
    q, k, v = randn(2, 3, 4, seed=0, requires_grad=True), randn(
        2, 5, 4, seed=1, requires_grad=True), randn(2, 5, 3, seed=2, requires_grad=True)
    mask = random_mask(2, 3, 5, seed=3)
    mask[1, 2] = False  # includes a fully masked row

    def f(q, k, v):
        return scaled_dot_product_attention(q, k, v, mask)

    assert torch.autograd.gradcheck(f, (q, k, v))


def test_sdpa_dropout_drops_weights_but_reports_them_whole() -> None:
    q = randn(4, 6, 8)
    torch.manual_seed(0)
    out, w = scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    torch.testing.assert_close(w.sum(-1), torch.ones(4, 6, dtype=F64))
    assert not torch.allclose(out, w @ q)


def test_sdpa_rejects_bad_input() -> None:
    q = randn(2, 3, 4)
    with pytest.raises(ValueError, match=r"k: expected last dimension d_k=4"):
        scaled_dot_product_attention(q, randn(2, 3, 5), randn(2, 3, 4))
    with pytest.raises(ValueError, match=r"v: expected shape \(\.\.\., L_k=3, d_v\)"):
        scaled_dot_product_attention(q, q, randn(2, 4, 4))
    with pytest.raises(
        ValueError,
        match=r"mask: expected a boolean tensor.*received dtype torch.float",
    ):
        scaled_dot_product_attention(q, q, q, torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"mask: expected a shape broadcastable to \(2, 3, 3\)"):
        scaled_dot_product_attention(q, q, q, torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask: expected a shape broadcastable"):
        scaled_dot_product_attention(q, q, q, torch.ones(5, 2, 3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"dropout_p: expected a number in \[0, 1\)"):
        scaled_dot_product_attention(q, q, q, dropout_p=1.0)
    with pytest.raises(ValueError, match=r"q: expected a floating-point tensor"):
        scaled_dot_product_attention(q.long(), q, q)


# --------------------------------------------------------------------------- the fast path


def _teaching_reference(q, k, v, mask, is_causal):
    """The teaching path's output for what the fast path is given: ``mask & causal``."""
    if is_causal:
        causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()  # top-left
        mask = causal if mask is None else mask & causal
    return scaled_dot_product_attention(q, k, v, mask)[0]


def _fast_case(b, h, lq, lk, kind, seed, dtype=F64, requires_grad=False):
    q = randn(b, h, lq, 8, seed=seed).to(dtype).requires_grad_(requires_grad)
    k = randn(b, h, lk, 8, seed=seed + 1).to(dtype).requires_grad_(requires_grad)
    v = randn(b, h, lk, 5, seed=seed + 2).to(dtype).requires_grad_(requires_grad)
    g = torch.Generator().manual_seed(seed + 3)
    if kind == "padding":  # right padding; the last sentence is padding alone
        lengths = torch.randint(1, lk + 1, (b,), generator=g)
        lengths[-1] = 0
        mask = (torch.arange(lk)[None, :] < lengths[:, None])[:, None, None, :]  # (B,1,1,L_k)
    elif kind == "random":  # per query; the last query of the last item sees nothing
        mask = random_mask(b, 1, lq, lk, seed=seed, keep_one=False)
        mask[-1, :, -1] = False
    elif kind == "none hidden":  # a mask that hides nothing
        mask = torch.ones(b, 1, 1, lk, dtype=torch.bool)
    else:
        mask = None
    return q, k, v, mask


@SETTINGS
@given(
    b=st.integers(1, 3), h=st.integers(1, 2), lq=st.integers(1, attention.FEW_QUERIES + 3),
    lk=st.integers(1, 6), kind=st.sampled_from(["none", "none hidden", "padding", "random"]),
    is_causal=st.booleans(), grad=st.booleans(), readable=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_fast_path_equals_the_teaching_path(b, h, lq, lk, kind, is_causal, grad, readable,
                                            seed) -> None:
    """Every route of fast_attention gives scaled_dot_product_attention's output, gradients
    included, in float64 (dropout off): few queries without gradients (the teaching formula),
    the fused kernel otherwise; padding, causal and fully masked rows; and with masks never
    read on the host, as on a GPU (``readable=False``)."""
    q, k, v, mask = _fast_case(b, h, lq, lk, kind, seed, requires_grad=grad)
    reads = attention.readable_without_sync if readable else (lambda t: False)
    with torch.set_grad_enabled(grad), mock.patch.object(attention, "readable_without_sync",
                                                         reads):
        fast = attention.fast_attention(q, k, v, mask, is_causal)
    expected = _teaching_reference(q, k, v, mask, is_causal)
    torch.testing.assert_close(fast, expected)
    assert torch.isfinite(fast).all()
    if grad:
        got = torch.autograd.grad(fast.square().sum(), (q, k, v))
        want = torch.autograd.grad(expected.square().sum(), (q, k, v))
        for name, a, e in zip("qkv", got, want, strict=True):
            torch.testing.assert_close(a, e, msg=lambda m, name=name: f"grad of {name}: {m}")


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("kind", ["padding", "random"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_fast_path_under_cpu_bf16_autocast_stays_within_fp32_rounding(grad, kind,
                                                                     is_causal) -> None:
    """Under CPU bf16 autocast the fast path's core runs in fp32, so its output is the fp32
    teaching path's on the same values within fp32 rounding (``assert_close``'s float32
    tolerance, rtol 1.3e-6, atol 1e-5), for fp32 inputs and for the bf16 inputs autocast's
    projections hand it. (A bf16 core would miss it by ~1e-2.)"""
    for dtype in (torch.float32, torch.bfloat16):
        q, k, v, mask = _fast_case(2, 2, 5, 7, kind, seed=3, dtype=dtype, requires_grad=grad)
        with torch.set_grad_enabled(grad), torch.autocast("cpu", dtype=torch.bfloat16):
            fast = attention.fast_attention(q, k, v, mask, is_causal)
        assert fast.dtype == torch.float32, f"{dtype} inputs gave {fast.dtype}"
        expected = _teaching_reference(q.float(), k.float(), v.float(), mask, is_causal)
        torch.testing.assert_close(fast, expected, rtol=1.3e-6, atol=1e-5)


# --------------------------------------------------------------------------- multi-head


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("need_weights", [False, True])
def test_mha_equals_torch_self_attention(bias: bool, need_weights: bool) -> None:
    ref, ours = pair(bias=bias)
    x = randn(3, 7, 16, seed=1)
    expected, expected_w = ref(x, x, x, need_weights=True, average_attn_weights=False)
    out, w = ours(x, x, x, need_weights=need_weights)
    torch.testing.assert_close(out, expected)
    if need_weights:
        torch.testing.assert_close(w, expected_w)
    else:
        assert w is None


@pytest.mark.parametrize("need_weights", [False, True])
def test_mha_equals_torch_with_padding_and_causal_masks(need_weights: bool) -> None:
    ref, ours = pair()
    ids = torch.tensor([[4, 5, 6, 7, 8, 9], [4, 5, 6, 0, 0, 0], [4, 5, 6, 7, 8, 0]])
    x = randn(3, 6, 16, seed=2)

    def attend(**masks) -> torch.Tensor:  # self-attention: x three times
        return ours(x, x, x, need_weights=need_weights, **masks)[0]

    keep = padding_mask(ids, 0)
    expected, _ = ref(x, x, x, key_padding_mask=ids == 0, need_weights=False)
    torch.testing.assert_close(attend(mask=keep), expected)
    causal = causal_mask(6)
    expected, _ = ref(x, x, x, attn_mask=~causal, need_weights=False)
    torch.testing.assert_close(attend(mask=causal), expected)
    torch.testing.assert_close(attend(is_causal=True), expected)
    expected, _ = ref(x, x, x, attn_mask=~causal, key_padding_mask=ids == 0, need_weights=False)
    torch.testing.assert_close(attend(mask=keep & causal), expected)
    torch.testing.assert_close(attend(mask=keep, is_causal=True), expected)
    # a (B, L_q, L_k) mask is read per batch item
    per_item = (keep & causal).squeeze(1)
    torch.testing.assert_close(attend(mask=per_item), expected)


@pytest.mark.parametrize("same_kv", [True, False])
def test_mha_equals_torch_cross_attention(same_kv: bool) -> None:
    ref, ours = pair(d_model=12, heads=3)
    query, memory = randn(2, 4, 12, seed=1), randn(2, 9, 12, seed=2)
    value = memory if same_kv else randn(2, 9, 12, seed=3)
    ids = torch.ones(2, 9, dtype=torch.long)
    ids[1, 5:] = 0
    expected, w_ref = ref(query, memory, value, key_padding_mask=ids == 0,
                          average_attn_weights=False)
    for need_weights in (False, True):
        out, w = ours(query, memory, value, mask=padding_mask(ids, 0), need_weights=need_weights)
        torch.testing.assert_close(out, expected)
    assert w.shape == (2, 3, 4, 9)
    torch.testing.assert_close(w, w_ref)
    # precomputed keys/values give the same result
    q = ours.project_query(query)
    out, _ = ours.attend(q, *ours.project_kv(memory, value), mask=padding_mask(ids, 0))
    torch.testing.assert_close(out, expected)


@SETTINGS
@given(
    b=st.integers(1, 3), lq=st.integers(1, 6), lk=st.integers(1, 6),
    heads=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2**16),
)
def test_mha_fast_path_equals_teaching_path(b, lq, lk, heads, seed) -> None:
    torch.manual_seed(seed)
    mha = MultiHeadAttention(8, heads).to(F64)
    x, mem = randn(b, lq, 8, seed=seed), randn(b, lk, 8, seed=seed + 1)
    mask = random_mask(b, 1, lq, lk, seed=seed, keep_one=False)  # fully masked rows allowed
    fast, _ = mha(x, mem, mem, mask=mask)
    slow, _ = mha(x, mem, mem, mask=mask, need_weights=True)
    torch.testing.assert_close(fast, slow)
    assert torch.isfinite(fast).all()
    fast_self, _ = mha(x, x, x, is_causal=True)
    torch.testing.assert_close(fast_self, mha(x, x, x, is_causal=True, need_weights=True)[0])


@pytest.mark.parametrize("lq", [1, 4, attention.FEW_QUERIES, attention.FEW_QUERIES + 1])
def test_mha_decoding_path_equals_fused_path(lq: int) -> None:
    """Without gradients, a few queries (decoding steps) take the explicit formula on the CPU;
    it gives what the fused kernel gives, fully masked queries included."""
    torch.manual_seed(lq)
    mha = MultiHeadAttention(8, 2).to(F64)
    x, mem = randn(3, lq, 8, seed=lq), randn(3, 5, 8, seed=lq + 1)
    mask = random_mask(3, 1, lq, 5, seed=lq, keep_one=False)
    fused, _ = mha(x, mem, mem, mask=mask)  # parameters need gradients: the fused kernel
    with torch.no_grad():
        decoding, _ = mha(x, mem, mem, mask=mask)
        unmasked, _ = mha(x, mem, mem)
    torch.testing.assert_close(decoding, fused)
    torch.testing.assert_close(unmasked, mha(x, mem, mem)[0])


@pytest.mark.parametrize("need_weights", [False, True])
def test_mha_fully_masked_rows_zero_and_finite_gradients(need_weights: bool) -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).to(F64)
    x = randn(2, 4, 8, seed=1, requires_grad=True)
    mask = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    mask[1, :, 2] = False
    out, _ = mha(x, x, x, mask=mask, need_weights=need_weights)
    # attention output is zero, so the row is just out_proj's bias
    torch.testing.assert_close(out[1, 2], mha.out_proj.bias)
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mha.parameters())


@pytest.mark.parametrize("need_weights", [False, True])
def test_the_branch_free_path_gives_what_the_cpu_shortcuts_give(monkeypatch,
                                                                need_weights: bool) -> None:
    """On a GPU (or while compiling) masks are never read on the host: every row is zeroed
    if fully masked, whether or not one is. The CPU's shortcuts must change nothing."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).to(F64)
    x = randn(2, 4, 8, seed=1)
    masks = [torch.ones(2, 1, 1, 4, dtype=torch.bool), random_mask(2, 1, 4, 4, seed=3),
             random_mask(2, 1, 4, 4, seed=4, keep_one=False)]
    masks[2][1, :, 2] = False  # a query that sees nothing
    shortcut = [mha(x, x, x, mask=m, need_weights=need_weights)[0] for m in masks]
    monkeypatch.setattr(attention, "readable_without_sync", lambda t: False)
    for m, expected in zip(masks, shortcut, strict=True):
        torch.testing.assert_close(mha(x, x, x, mask=m, need_weights=need_weights)[0], expected)
    torch.testing.assert_close(shortcut[2][1, 2], mha.out_proj.bias)


@SETTINGS
@given(b=st.integers(1, 3), length=st.integers(2, 7), seed=st.integers(0, 2**16))
def test_mha_is_permutation_equivariant(b, length, seed) -> None:
    torch.manual_seed(seed)
    mha = MultiHeadAttention(8, 2).to(F64)
    x = randn(b, length, 8, seed=seed)
    perm = torch.randperm(length)
    for need_weights in (False, True):
        out, _ = mha(x, x, x, need_weights=need_weights)
        xp = x[:, perm]
        out_perm, _ = mha(xp, xp, xp, need_weights=need_weights)
        torch.testing.assert_close(out_perm, out[:, perm])


def test_mha_batch_items_are_independent() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).to(F64)
    x = randn(4, 5, 8, seed=1)
    y = x.clone()
    y[1:] = randn(3, 5, 8, seed=2)
    for need_weights in (False, True):
        def attend(t: torch.Tensor, need_weights: bool = need_weights) -> torch.Tensor:
            return mha(t, t, t, need_weights=need_weights)[0]

        torch.testing.assert_close(attend(x)[0], attend(y)[0])
        torch.testing.assert_close(attend(x[:1])[0], attend(x)[0])


def test_kv_cache_token_by_token_equals_full_causal_attention() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).to(F64).eval()
    x = randn(2, 6, 16, seed=1)
    full, _ = mha(x, x, x, mask=causal_mask(6))
    steps, k, v = [], None, None
    for t in range(6):
        x_t = x[:, t : t + 1]
        k_t, v_t = mha.project_kv(x_t, x_t)
        assert k_t.shape == (2, 4, 1, 4)
        k = k_t if k is None else torch.cat([k, k_t], dim=2)
        v = v_t if v is None else torch.cat([v, v_t], dim=2)
        out_t, _ = mha.attend(mha.project_query(x_t), k, v, need_weights=t % 2 == 0)
        steps.append(out_t)
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


def test_dropout_only_in_training() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, dropout=0.5).to(F64)
    x = randn(2, 5, 8, seed=1)
    mha.eval()
    torch.testing.assert_close(mha(x, x, x)[0], mha(x, x, x, need_weights=True)[0])
    mha.train()
    assert not torch.allclose(mha(x, x, x)[0], mha.eval()(x, x, x)[0])


def test_from_torch_rejects_unsupported_modules() -> None:
    with pytest.raises(ValueError, match=r"m: expected an nn.MultiheadAttention"):
        MultiHeadAttention.from_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"m: expected kdim == vdim == embed_dim"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, kdim=4, vdim=4))
    with pytest.raises(ValueError, match=r"m: expected no add_bias_kv"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))


def test_mha_rejects_bad_input() -> None:
    with pytest.raises(
        BookError,
        match=r"num_heads: expected a divisor of d_model=10, received 4",
    ):
        MultiHeadAttention(10, 4)
    with pytest.raises(BookError, match=r"dropout: expected a number in \[0, 1\)"):
        MultiHeadAttention(8, 2, dropout=1.5)
    with pytest.raises(BookError, match=r"dropout: expected a number in \[0, 1\), received '0.1'"):
        MultiHeadAttention(8, 2, dropout="0.1")
    with pytest.raises(BookError, match=r"bias: expected True or False"):
        MultiHeadAttention(8, 2, bias=1)
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).to(F64)
    x = randn(2, 3, 8)
    bad = randn(2, 3, 6)
    with pytest.raises(
        BookError,
        match=r"query: expected shape \(B, L, d_model=8\), received shape \(2, 3, 6\)",
    ):
        mha(bad, bad, bad)
    with pytest.raises(BookError, match=r"key: expected shape \(B, L, d_model=8\)"):
        mha(x, randn(2, 4, 6), randn(2, 4, 6))
    with pytest.raises(BookError, match=r"value: expected shape \(2, 4, d_model=8\)"):
        mha(x, randn(2, 4, 8), randn(2, 5, 8))
    with pytest.raises(BookError, match=r"value: expected shape \(2, 4, d_model=8\)"):
        mha(x, randn(2, 4, 8), randn(3, 4, 8))
    with pytest.raises(
        BookError, match=r"k: expected shape \(B=2, h=2, L, d_k=4\).*received shape \(3, 2, 4, 4\)",
    ):
        mha(x, randn(3, 4, 8), randn(3, 4, 8))
    with pytest.raises(
        BookError,
        match=r"mask: expected a boolean tensor \(True = may attend\), "
        r"received dtype torch.float32",
    ):
        mha(x, x, x, mask=torch.ones(3, 3))
    with pytest.raises(
        BookError,
        match=r"mask: expected a shape broadcastable to \(2, 2, 3, 3\), received shape \(3, 4\)",
    ):
        mha(x, x, x, mask=torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(BookError, match=r"mask: expected a shape broadcastable"):
        mha(x, x, x, mask=torch.ones(5, 3, 3, dtype=torch.bool))
    q = mha.project_query(x)
    with pytest.raises(BookError, match=r"k: expected shape \(B=2, h=2, L, d_k=4\)"):
        mha.attend(q, randn(2, 3, 4, 4), randn(2, 2, 4, 4))
    with pytest.raises(BookError, match=r"v: expected .*v's L as k's"):
        mha.attend(q, randn(2, 2, 4, 4), randn(2, 2, 5, 4))
    with pytest.raises(TypeError):  # key and value are required: no guessing
        mha(x)

    assert set(attention.__all__) <= set(dir(attention))


# --------------------------------------------------------------------------- refusals


def _with(t: torch.Tensor, value: float) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[1] = value
    return t


def test_masked_softmax_checks_its_arguments() -> None:
    scores = randn(2, 3)
    with pytest.raises(BookError, match=r"scores: expected a torch.Tensor, received list"):
        masked_softmax([1.0, 2.0], None)  # type: ignore[arg-type]
    with pytest.raises(BookError, match=r"scores: expected a floating-point tensor"):
        masked_softmax(torch.ones(2, 3, dtype=torch.long), None)
    with pytest.raises(BookError, match=r"mask: expected a boolean tensor"):
        masked_softmax(scores, torch.ones(2, 3))
    with pytest.raises(BookError, match=r"mask: expected a shape broadcastable to \(2, 3\), "
                                        r"received shape \(4, 3\)"):
        masked_softmax(scores, torch.ones(4, 3, dtype=torch.bool))
    with pytest.raises(BookError, match=r"mask: expected a tensor on cpu"):
        masked_softmax(scores, torch.ones(2, 3, dtype=torch.bool, device="meta"))


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_masked_softmax_refuses_nan_and_plus_inf(value: float) -> None:
    with pytest.raises(BookError, match=r"scores: expected no NaN or \+inf"):
        masked_softmax(_with(randn(2, 3), value), None)


def test_masked_softmax_takes_minus_inf_but_not_a_row_of_it() -> None:
    scores = _with(randn(2, 3), -math.inf)
    assert masked_softmax(scores, None)[0, 1] == 0
    scores[1] = -math.inf
    with pytest.raises(BookError, match=r"scores: expected a finite score for each row"):
        masked_softmax(scores, None)
    mask = torch.tensor([[True, True, True], [False, False, False]])
    assert (masked_softmax(scores, mask)[1] == 0).all()  # a fully masked row: zeros


@pytest.mark.parametrize("name", ["q", "k", "v"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_sdpa_refuses_non_finite_inputs(name: str, value: float) -> None:
    tensors = {"q": randn(2, 3, 4), "k": randn(2, 5, 4, seed=1), "v": randn(2, 5, 4, seed=2)}
    tensors[name] = _with(tensors[name], value)
    with pytest.raises(BookError, match=rf"{name}: expected finite values"):
        scaled_dot_product_attention(tensors["q"], tensors["k"], tensors["v"])
    if name != "v":
        with pytest.raises(BookError, match=rf"{name}: expected finite values"):
            dot_score(tensors["q"], tensors["k"])


def test_sdpa_refuses_scores_that_overflow() -> None:
    q = torch.full((1, 2, 4), 1e30)
    with pytest.raises(BookError, match=r"q, k: expected scores .* finite, received scores "
                                        r"that overflow"):
        scaled_dot_product_attention(q, q, q)


def test_sdpa_refuses_mixed_dtypes_and_devices_and_a_string_rate() -> None:
    q, k, v = randn(2, 3, 4), randn(2, 5, 4), randn(2, 5, 4)
    with pytest.raises(BookError, match=r"k: expected dtype torch.float64 \(as q\), "
                                        r"received torch.float32"):
        scaled_dot_product_attention(q, k.float(), v)
    with pytest.raises(BookError, match=r"v: expected dtype torch.float64 \(as q\)"):
        scaled_dot_product_attention(q, k, v.float())
    with pytest.raises(BookError, match=r"k: expected dtype torch.float64 \(as q\)"):
        scaled_dot_score(q, k.float())
    with pytest.raises(BookError, match=r"k: expected a tensor on cpu \(as q\), received meta"):
        scaled_dot_product_attention(q, k.to("meta"), v)
    with pytest.raises(BookError, match=r"mask: expected a tensor on cpu"):
        scaled_dot_product_attention(q, k, v, torch.ones(3, 5, dtype=torch.bool, device="meta"))
    with pytest.raises(BookError, match=r"dropout_p: expected a number in \[0, 1\), "
                                        r"received '0.1'"):
        scaled_dot_product_attention(q, k, v, dropout_p="0.1")  # type: ignore[arg-type]


def test_the_fast_path_still_checks_its_plain_arguments() -> None:
    q = randn(1, 2, 3, 4)
    with pytest.raises(BookError, match=r"dropout_p: expected a number in \[0, 1\), "
                                        r"received '0.1'"):
        attention.fast_attention(q, q, q, None, False, "0.1")  # type: ignore[arg-type]
    with pytest.raises(BookError, match=r"is_causal: expected True or False, received 'yes'"):
        attention.fast_attention(q, q, q, None, "yes", 0.0)  # type: ignore[arg-type]


def test_mha_refuses_another_dtype_or_device_and_non_bool_flags() -> None:
    mha = MultiHeadAttention(8, 2).to(F64)
    x = randn(2, 3, 8)
    with pytest.raises(BookError, match=r"query: expected dtype torch.float64 \(the module's"):
        mha(x.float(), x.float(), x.float())
    with pytest.raises(BookError, match=r"key: expected dtype torch.float64"):
        mha(x, x.float(), x.float())
    with pytest.raises(BookError, match=r"query: expected a tensor on cpu \(the module's\)"):
        mha(x.to("meta"), x.to("meta"), x.to("meta"))
    with pytest.raises(BookError, match=r"is_causal: expected True or False, received 'yes'"):
        mha(x, x, x, is_causal="yes")  # type: ignore[arg-type]
    with pytest.raises(BookError, match=r"need_weights: expected True or False, received 1"):
        mha(x, x, x, need_weights=1)  # type: ignore[arg-type]
    q = mha.project_query(x)
    k, v = mha.project_kv(x, x)
    with pytest.raises(BookError, match=r"v: expected dtype torch.float64 on cpu \(as q\)"):
        mha.attend(q, k, v.float())
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast: the dtypes may differ
        assert mha.float()(x.bfloat16(), x.bfloat16(), x.bfloat16())[0].shape == (2, 3, 8)
