"""The ablation runner: reduced key size equals a smaller d_k, runs are seeded, paired and
cached; the statistics: Student's t, Welch's test over seeds, the paired bootstrap over
sentences of seed pairs, Holm's correction and the verdicts built on them."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import math
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import transformer_book.analysis.ablation as ablation
from transformer_book.analysis.ablation import (
    PAPER_TABLE3,
    AblationResult,
    KeySizeMask,
    VariantRuns,
    evaluate_variant,
    relative_change,
    restrict_key_size,
    results_by_name,
    run_ablation,
    train_variant,
)
from transformer_book.analysis.ablation_stats import (
    ablation_verdicts,
    holm_bonferroni,
    mean_sd,
    paper_change,
    row_verdict,
    seed_change,
    seed_paired_bleu,
    t_critical,
    t_two_sided_p,
    verdict_rows,
    verdict_summary,
)
from transformer_book.course.tables import Table
from transformer_book.data.batching import TokenBudgetSampler
from transformer_book.data.tokenizer import BPETokenizer
from transformer_book.inference.scoring import score_corpus
from transformer_book.nn.attention import MultiHeadAttention
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer, count_parameters
from transformer_book.train.corpus import PreparedData, make_batch
from transformer_book.train.objective import label_smoothed_cross_entropy
from transformer_book.util.env import set_seed
from transformer_book.util.validation import BookError

WORDS = ["ein", "mann", "hund", "katze", "sitzt", "läuft", "auf", "dem"]


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> PreparedData:
    """A made-up parallel corpus with a 300-token BPE: fast, no Multi30k needed."""
    rng = random.Random(0)
    pairs = []
    for _ in range(120):
        n = rng.randint(2, 5)
        src = " ".join(rng.choice(WORDS) for _ in range(n))
        pairs.append((src, src.replace("ein", "a").replace("mann", "man")))
    tok = BPETokenizer.train([s for s, _ in pairs] + [t for _, t in pairs], 300)
    src = tok.encode_batch([s for s, _ in pairs])
    tgt = tok.encode_batch([t for _, t in pairs])
    path = Path(tmp_path_factory.mktemp("bpe")) / "tokenizer.json"
    return PreparedData(tok, path, src[:100], tgt[:100], src[100:], tgt[100:],
                        [t for _, t in pairs[100:]], {})


def _config(data: PreparedData, **overrides) -> TransformerConfig:
    return TransformerConfig.preset("tiny", data.tokenizer.vocab_size, d_model=16, d_ff=32,
                                    num_heads=4, max_len=64, **overrides)


def test_restricted_key_size_equals_attention_with_smaller_keys():
    torch.manual_seed(0)
    d_model, h, d_k = 12, 3, 2
    m = MultiHeadAttention(d_model, h).double()
    torch.nn.init.normal_(m.in_proj.bias)
    w, b = m.in_proj.weight.detach().clone(), m.in_proj.bias.detach().clone()
    unused = restrict_key_size(m, d_k)
    x = torch.randn(2, 5, d_model, dtype=torch.float64)
    out, _ = m(x, x, x)
    # From scratch: project, keep d_k query/key dims per head, divide by sqrt(d_k).
    q, k, v = (x @ w.T + b).split(d_model, dim=-1)  # three (B, L, d_model)
    q, k, v = (t.view(2, 5, h, d_model // h).transpose(1, 2) for t in (q, k, v))  # (B, h, L, 4)
    scores = q[..., :d_k] @ k[..., :d_k].transpose(-2, -1) / math.sqrt(d_k)
    heads = torch.softmax(scores, dim=-1) @ v  # (B, h, L, d_v)
    expected = m.out_proj(heads.transpose(1, 2).reshape(2, 5, d_model))
    torch.testing.assert_close(out, expected)
    out_w, _ = m(x, x, x, need_weights=True)  # teaching path agrees too
    torch.testing.assert_close(out_w, expected)
    assert unused == 2 * h * (d_model // h - d_k) * (d_model + 1)


def test_full_key_size_is_the_identity_and_bad_sizes_are_refused():
    torch.manual_seed(1)
    m = MultiHeadAttention(8, 2).double()
    x = torch.randn(1, 3, 8, dtype=torch.float64)
    before, _ = m(x, x, x)
    assert restrict_key_size(m, 4) == 0
    torch.testing.assert_close(m(x, x, x)[0], before)
    with pytest.raises(BookError, match=r"d_k: expected an integer >= 1 and <= 4, received 5"):
        KeySizeMask(8, 2, 5)
    with pytest.raises(BookError, match="d_k"):
        KeySizeMask(8, 2, 0)
    with pytest.raises(ValueError, match="model"):
        restrict_key_size(torch.nn.Linear(2, 2), 1)


def test_restricted_model_counts_fewer_parameters(tiny_data):
    config = _config(tiny_data)
    model = Transformer(config)
    unused = restrict_key_size(model, 2)
    # 6 attention modules (2 encoder self, 2 decoder self, 2 cross), 2 dims dropped per head.
    assert unused == 6 * 2 * 4 * 2 * (16 + 1)
    assert count_parameters(model) - unused > 0


def test_relative_change():
    assert relative_change(4.0, 5.0) == pytest.approx(0.25)
    assert relative_change(25.8, 24.9) == pytest.approx(-0.9 / 25.8)
    with pytest.raises(ValueError, match="baseline"):
        relative_change(0.0, 1.0)
    with pytest.raises(ValueError, match="variant"):
        relative_change(1.0, float("nan"))


def test_paper_table3_holds_the_base_row():
    assert PAPER_TABLE3["base"] == (4.92, 25.8)
    assert all(ppl > 4 and 24 < bleu < 26 for ppl, bleu in PAPER_TABLE3.values())


@pytest.mark.slow
def test_train_variant_is_seeded_and_evaluates_plain_cross_entropy(tiny_data):
    config = _config(tiny_data, dropout=0.0)
    a = train_variant(config, tiny_data, steps=3, seed=0, max_tokens=64, warmup_steps=2,
                      bleu_sentences=4, device="cpu")
    b = train_variant(config, tiny_data, steps=3, seed=0, max_tokens=64, warmup_steps=2,
                      bleu_sentences=4, device="cpu")
    assert a.train_losses == b.train_losses and a.val_nll == b.val_nll
    assert len(a.train_losses) == 3 and a.val_ppl == pytest.approx(math.exp(a.val_nll))
    assert 0.0 <= a.bleu <= 100.0 and a.bleu_sentences == 4
    # BLEU is the score of the kept greedy translations (detokenised, aligned with the refs).
    assert len(a.translations) == 4 and all(isinstance(t, str) for t in a.translations)
    assert a.bleu == score_corpus(a.translations, tiny_data.val_references[:4]).bleu
    # The first logged loss is the label-smoothed loss of the fresh model (seeded weights) on
    # the first batch of the seeded sampler; the same run reports no BLEU when asked for none.
    for eps in (0.0, 0.3):
        run = train_variant(config.replace(label_smoothing=eps), tiny_data, steps=1, seed=0,
                            max_tokens=64, warmup_steps=2, bleu_sentences=0, device="cpu")
        set_seed(0)
        model = Transformer(config.replace(label_smoothing=eps))
        sampler = TokenBudgetSampler([len(s) for s in tiny_data.train_src], 64,
                                     [len(t) + 1 for t in tiny_data.train_tgt], shuffle=True,
                                     seed=0)
        src, tgt_in, tgt_out = make_batch(tiny_data.train_src, tiny_data.train_tgt,
                                          next(iter(sampler)), torch.device("cpu"))
        with torch.no_grad():
            expected = label_smoothed_cross_entropy(model(src, tgt_in), tgt_out, eps, 0)
        assert run.train_losses[0] == pytest.approx(float(expected), rel=1e-6)
        assert math.isnan(run.bleu) and run.bleu_sentences == 0 and run.translations == []


def test_evaluate_variant_matches_a_manual_loss(tiny_data):
    torch.manual_seed(0)
    model = Transformer(_config(tiny_data))
    nll, ppl, bleu, translations = evaluate_variant(model, tiny_data, bleu_sentences=0)
    assert math.isnan(bleu) and translations == []
    total = tokens = 0.0
    model.eval()
    with torch.no_grad():
        for s, t in zip(tiny_data.val_src, tiny_data.val_tgt, strict=True):
            src = torch.tensor([s])
            tgt = torch.tensor([[1, *t, 2]])
            logits = model(src, tgt[:, :-1])
            total += float(label_smoothed_cross_entropy(logits, tgt[:, 1:], 0.0,
                                                        reduction="sum"))
            tokens += len(t) + 1
    assert nll == pytest.approx(total / tokens, rel=1e-5)
    assert ppl == pytest.approx(math.exp(nll))


@pytest.mark.slow
def test_run_ablation_trains_each_variant_once_per_seed(tiny_data):
    variants = {"base": {}, "h=1": {"num_heads": 1}, "d_k=2": {"d_k": 2, "seeds": [1]},
                "base again": {"seeds": (0,)}}
    runs = run_ablation(variants, _config(tiny_data), tiny_data, steps=2, seeds=(0, 1),
                        max_tokens=64, warmup_steps=2, bleu_sentences=3, device="cpu")
    assert list(runs) == list(variants) and all(isinstance(r, VariantRuns) for r in runs.values())
    assert runs["base"].seeds == [0, 1] and runs["d_k=2"].seeds == [1]
    assert runs["base again"].seeds == [0]
    assert runs["h=1"].num_parameters == runs["base"].num_parameters  # (A): same size
    assert runs["d_k=2"].num_parameters < runs["base"].num_parameters  # (B): smaller
    assert runs["d_k=2"].run(1).extra["d_k"] == 2 and runs["base"].run(0).extra["d_k"] == 4
    base = runs["base"]
    assert base.val_ppl == [r.val_ppl for r in base.runs]
    assert base.bleu == [r.bleu for r in base.runs]
    assert base.run(1).train_losses != base.run(0).train_losses, "another seed, another run"
    assert runs["base again"].run(0).train_losses == base.run(0).train_losses, "same seed, same run"
    assert runs["base again"].run(0).translations == base.run(0).translations
    assert len(base.run(0).translations) == 3
    with pytest.raises(BookError, match=r"seed: expected one of this variant's seeds \[0, 1\]"):
        base.run(2)
    assert list(results_by_name([base.run(0), runs["h=1"].run(0)])) == ["base", "h=1"]
    with pytest.raises(BookError, match="results: expected unique variant names"):
        results_by_name(base.runs)


def test_run_ablation_checks_every_variant_before_training(tiny_data, monkeypatch):
    def no_training(*args, **kwargs):
        raise AssertionError("trained before every variant was checked")

    monkeypatch.setattr(ablation, "train_variant", no_training)
    config = _config(tiny_data)
    with pytest.raises(ValueError, match="unknown keys"):
        run_ablation({"base": {}, "x": {"heads": 2}}, config, tiny_data, steps=1)
    with pytest.raises(ValueError, match="variants"):
        run_ablation({}, config, tiny_data, steps=1)
    for seeds, message in (((), "non-empty sequence of seeds"), ((0, 0), "distinct seeds"),
                           ((0, -1), "integer >= 0"), ("01", "non-empty sequence of seeds")):
        with pytest.raises(BookError, match=rf"^seeds: expected .*{message}"):
            run_ablation({"base": {}}, config, tiny_data, steps=1, seeds=seeds)
    with pytest.raises(BookError, match=r"variants\['b'\]\['seeds'\]: expected distinct"):
        run_ablation({"a": {}, "b": {"seeds": [3, 3]}}, config, tiny_data, steps=1)
    with pytest.raises(ValueError, match="vocab_size"):
        train_variant(TransformerConfig.preset("tiny", 50), tiny_data, steps=1)


# ------------------------------------------------------------------------ statistics


def _runs(name: str, ppls: list[float], bleus: list[float]) -> VariantRuns:
    """A variant with made-up scores, one run per seed 0, 1, ..."""
    return VariantRuns(name, {}, [
        AblationResult(name=name, overrides={}, seed=seed, num_parameters=10, steps=1,
                       train_losses=[1.0], val_nll=math.log(ppl), val_ppl=ppl, bleu=bleu,
                       bleu_sentences=2, seconds=0.0, translations=["a", "b"])
        for seed, (ppl, bleu) in enumerate(zip(ppls, bleus, strict=True))])


def test_mean_sd_is_the_sample_standard_deviation():
    assert mean_sd([1.0, 2.0, 3.0, 6.0]) == pytest.approx((3.0, math.sqrt(14 / 3)))
    mean, sd = mean_sd([4.5])
    assert mean == 4.5 and math.isnan(sd), "one run has no spread"
    with pytest.raises(BookError, match="values: expected a non-empty sequence"):
        mean_sd([])
    with pytest.raises(BookError, match="values: expected a finite number, received nan"):
        mean_sd([1.0, math.nan])


@pytest.mark.parametrize("t", [0.0, 0.3, 1.0, 2.5, 12.0, -4.0])
def test_student_t_tails_match_closed_forms(t):
    # df = 1 is the Cauchy distribution, df = 2 has a closed-form CDF too.
    assert t_two_sided_p(t, 1) == pytest.approx(1 - 2 / math.pi * math.atan(abs(t)), abs=1e-12)
    assert t_two_sided_p(t, 2) == pytest.approx(1 - abs(t) / math.sqrt(2 + t * t), abs=1e-12)
    # A huge df is the normal distribution.
    assert t_two_sided_p(t, 1e7) == pytest.approx(math.erfc(abs(t) / math.sqrt(2)), abs=1e-6)


def test_t_critical_inverts_the_tail():
    for df, table in ((1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (1e7, 1.9600)):
        assert t_critical(df) == pytest.approx(table, abs=1e-4)
        assert t_two_sided_p(t_critical(df), df) == pytest.approx(0.05, abs=1e-10)
    assert t_critical(3.5, level=0.9) < t_critical(3.5)
    with pytest.raises(BookError, match="df: expected a number > 0"):
        t_critical(0)
    with pytest.raises(BookError, match=r"level: expected a number in \(0, 1\)"):
        t_critical(3, level=95)


def test_seed_change_is_welch_test_of_the_means():
    rng = random.Random(7)
    base = [rng.gauss(10, 1) for _ in range(3)]
    variant = [rng.gauss(12, 2) for _ in range(4)]
    (mb, sb), (mv, sv) = mean_sd(base), mean_sd(variant)
    a, b = sv**2 / 4, sb**2 / 3
    df = (a + b) ** 2 / (a**2 / 3 + b**2 / 2)  # Welch-Satterthwaite
    change = seed_change(base, variant)
    assert change.delta == pytest.approx(mv - mb) and change.se == pytest.approx(math.sqrt(a + b))
    assert change.df == pytest.approx(df)
    assert change.p_value == pytest.approx(t_two_sided_p((mv - mb) / math.sqrt(a + b), df))
    low, high = change.interval
    assert (low + high) / 2 == pytest.approx(change.delta)
    assert (high - low) / 2 == pytest.approx(t_critical(df) * change.se)
    assert change.measured == (change.p_value < 0.05) == (low > 0 or high < 0)
    relative = seed_change(base, variant, relative=True)  # in % of the baseline's mean
    assert relative.delta == pytest.approx(100 * (mv - mb) / mb)
    assert relative.se == pytest.approx(100 * change.se / mb)
    assert relative.p_value == pytest.approx(change.p_value) and "%" in str(relative)


def test_seed_change_without_spread_or_with_one_seed():
    exact = seed_change([2.0, 2.0], [3.0, 3.0, 3.0])
    assert exact.se == 0.0 and exact.p_value == 0.0 and exact.measured
    assert not seed_change([2.0, 2.0], [2.0, 2.0]).measured
    single = seed_change([2.0], [3.0, 3.5])
    assert single.delta == pytest.approx(1.25) and math.isnan(single.p_value)
    assert not single.tested and not single.measured and "one seed" in str(single)


def test_holm_bonferroni_by_hand():
    # Sorted: 0.005, 0.01, 0.03, 0.04 -> 4 x 0.005, 3 x 0.01, 2 x 0.03, max(0.06, 1 x 0.04).
    assert holm_bonferroni([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm_bonferroni([0.6, 0.7]) == [1.0, 1.0], "capped at 1, then carried down"
    adjusted = holm_bonferroni([0.01, math.nan, 0.2])  # a test that did not run: m = 2
    assert adjusted[0] == pytest.approx(0.02) and math.isnan(adjusted[1])
    assert adjusted[2] == pytest.approx(0.2)
    assert holm_bonferroni([]) == [] and holm_bonferroni([0.03]) == [0.03]
    with pytest.raises(BookError, match=r"p_values: expected p-values in \[0, 1\]"):
        holm_bonferroni([0.1, 1.5])
    with pytest.raises(BookError, match="p_values: expected a sequence"):
        holm_bonferroni(0.1)


def test_holm_bonferroni_properties_on_random_families():
    rng = random.Random(3)
    for _ in range(200):
        m = rng.randint(1, 20)
        p = [rng.random() ** 3 for _ in range(m)]  # many small ones
        adjusted = holm_bonferroni(p)
        bonferroni = [min(1.0, m * x) for x in p]
        assert all(x <= a <= b <= 1.0 for x, a, b in zip(p, adjusted, bonferroni, strict=True))
        order = sorted(range(m), key=lambda i: p[i])
        assert all(adjusted[i] <= adjusted[j] for i, j in itertools.pairwise(order))
        # Step-down: reject the k smallest, where k is the first i with p_(i) >= α/(m - i).
        k = next((i for i, j in enumerate(order) if p[j] >= 0.05 / (m - i)), m)
        assert {j for j in range(m) if adjusted[j] < 0.05} == set(order[:k])


def test_holm_bonferroni_keeps_the_family_wise_error_rate():
    # 18 true null hypotheses (uniform p-values): a false "measured" anywhere in at most 5%
    # of the families; uncorrected, in about 1 - 0.95^18 = 60% of them.
    rng = random.Random(11)
    families = [[rng.random() for _ in range(18)] for _ in range(4000)]
    corrected = sum(min(holm_bonferroni(f)) < 0.05 for f in families) / len(families)
    raw = sum(min(f) < 0.05 for f in families) / len(families)
    assert corrected < 0.06 and raw > 0.55


def test_holm_bonferroni_matches_statsmodels():
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    rng = random.Random(5)
    p = [rng.random() ** 2 for _ in range(15)]
    expected = multitest.multipletests(p, method="holm")[1]
    assert holm_bonferroni(p) == pytest.approx(list(expected), abs=1e-12)


def _systems(seed: int, n: int = 24):
    """Made-up references and, per system, a corrupted copy of each (some words dropped)."""
    rng = random.Random(seed)
    references = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8)))
                  for _ in range(n)]

    def system(keep: float) -> list[str]:
        return [" ".join(w for w in r.split() if rng.random() < keep) or r.split()[0]
                for r in references]

    return references, system


def test_seed_paired_bleu_with_one_pair_is_sacrebleus_paired_test():
    from transformer_book.inference.significance import compare_systems

    references, system = _systems(0)
    base, variant = system(0.6), system(0.8)
    test = seed_paired_bleu([base], [variant], references, resamples=200, seed=7)
    comparison = compare_systems(base, variant, references, resamples=200, seed=7)
    assert test.delta == pytest.approx(comparison.delta, abs=1e-9)
    assert test.interval == pytest.approx(comparison.interval, abs=1e-9)
    assert test.p_value == pytest.approx(comparison.p_value, abs=1e-12)
    assert test.pair_deltas == pytest.approx((comparison.delta,))


def test_seed_paired_bleu_pools_the_pairs_on_the_same_resampled_sentences():
    import numpy as np
    from sacrebleu import corpus_bleu

    references, system = _systems(1)
    pairs = [(system(0.7), system(0.75)) for _ in range(3)]
    resamples, seed = 120, 9
    test = seed_paired_bleu([b for b, _ in pairs], [v for _, v in pairs], references,
                            resamples=resamples, seed=seed)
    bleu = lambda hyps, refs: corpus_bleu(hyps, [refs]).score  # noqa: E731
    deltas = [bleu(v, references) - bleu(b, references) for b, v in pairs]
    assert test.pair_deltas == pytest.approx(tuple(deltas))
    assert test.delta == pytest.approx(sum(deltas) / 3)
    # Plain and slow: the same sentence indices for every pair, every corpus scored afresh.
    draws = np.random.default_rng(seed).choice(len(references), size=(resamples,
                                                                      len(references)))
    resampled = np.array([
        np.mean([bleu([v[i] for i in idx], [references[i] for i in idx])
                 - bleu([b[i] for i in idx], [references[i] for i in idx]) for b, v in pairs])
        for idx in draws])
    assert test.interval == pytest.approx(tuple(np.quantile(resampled, [0.025, 0.975])))
    shifted = np.abs(resampled) - np.abs(resampled).mean()
    assert test.p_value == pytest.approx((np.sum(shifted > abs(test.delta)) + 1)
                                         / (resamples + 1))
    same = seed_paired_bleu([pairs[0][0]], [pairs[0][0]], references, resamples=100)
    assert same.delta == 0.0 and same.p_value == 1.0 and not same.significant
    with pytest.raises(BookError, match="variant_translations: expected one list of"):
        seed_paired_bleu([pairs[0][0]], [], references)
    with pytest.raises(BookError, match=r"variant_translations\[0\]: expected 24 translations"):
        seed_paired_bleu([pairs[0][0]], [pairs[0][1][:5]], references)


def test_row_verdict_follows_the_tests_and_the_papers_direction():
    base = _runs("base", [10.0, 10.2, 9.8], [20.0, 20.5, 19.5])
    worse = _runs("(A) h=1, d_k=64", [12.0, 12.3, 11.9], [15.0, 15.5, 14.8])
    real = SimpleNamespace(delta=-5.0, p_value=0.001)
    verdict = row_verdict(base, worse, comparison=real, paper_row="(A) h=1, d_k=d_v=512")
    assert verdict.paper == pytest.approx(paper_change("(A) h=1, d_k=d_v=512"))
    assert verdict.ppl.measured and verdict.bleu.measured
    assert verdict.p_values == (verdict.ppl.p_value, max(verdict.bleu.p_value, 0.001))
    assert verdict.adjusted == verdict.p_values, "a row judged alone"
    assert (verdict.ppl_verdict.kind, str(verdict.ppl_verdict)) == ("agrees", "agrees (hurts)")
    assert (verdict.bleu_verdict.kind, str(verdict.bleu_verdict)) == ("agrees", "agrees (hurts)")
    # The sentence test must confirm a BLEU change, in the same direction: the larger p.
    for comparison, p in ((SimpleNamespace(delta=-5.0, p_value=0.2), 0.2),
                          (SimpleNamespace(delta=+1.0, p_value=0.01), 1.0)):
        unconfirmed = row_verdict(base, worse, comparison=comparison)
        assert unconfirmed.p_values[1] == p and unconfirmed.bleu_verdict.kind == "noise"
        assert unconfirmed.ppl_verdict.kind == "measured"
        assert str(unconfirmed.bleu_verdict) == f"not measured (p = {p:.2f})"
    # A verdict reads the adjusted p, not the raw one.
    held = row_verdict(base, worse, comparison=real, adjusted=(0.06, 0.01))
    assert held.ppl_verdict.kind == "noise" and held.bleu_verdict.kind == "measured"
    # The paper saw "no change" for (E); a measured change of ours is new; noise is noise.
    better = row_verdict(base, _runs("pos", [8.0, 8.1, 7.9], [20.1, 19.6, 20.3]),
                         paper_row="(E) learned positions")
    assert str(better.ppl_verdict) == "helps; paper: none" and better.ppl_verdict.kind == "new"
    assert better.bleu_verdict.kind == "noise" and "p = " in str(better.bleu_verdict)
    against = row_verdict(base, _runs("drop", [8.0, 8.1, 7.9], [25.0, 25.2, 24.9]),
                          paper_row="(D) P_drop=0.0")
    assert str(against.ppl_verdict) == str(against.bleu_verdict) == "disagrees (helps)"
    one = row_verdict(_runs("base", [10.0], [20.0]), _runs("x", [11.0], [19.0]))
    assert one.ppl_verdict.kind == one.bleu_verdict.kind == "untested"
    with pytest.raises(BookError, match="row: expected a row of PAPER_TABLE3"):
        row_verdict(base, worse, paper_row="(C) N=8")
    with pytest.raises(BookError, match="variant: expected a VariantRuns"):
        row_verdict(base, [worse])
    with pytest.raises(BookError, match="adjusted: expected two p-values"):
        row_verdict(base, worse, adjusted=(0.01,))


def test_ablation_verdicts_correct_over_the_whole_family():
    base = _runs("base", [10.0, 10.2, 9.8], [20.0, 20.5, 19.5])
    variants = [_runs("clear", [14.0, 14.1, 13.9], [15.0, 15.2, 14.9]),
                _runs("edge", [10.5, 10.9, 10.6], [19.0, 19.9, 19.3]),
                _runs("none", [10.1, 9.9, 10.3], [20.1, 20.4, 19.6])]
    sentences = [SimpleNamespace(delta=-5.0, p_value=0.001), None,
                 SimpleNamespace(delta=0.2, p_value=0.6)]
    verdicts = ablation_verdicts(base, variants, comparisons=sentences,
                                 paper_rows=["(A) h=1, d_k=d_v=512", None, None])
    alone = [row_verdict(base, v, comparison=c) for v, c in zip(variants, sentences,
                                                                 strict=True)]
    raw = [p for row in alone for p in row.p_values]
    assert [p for v in verdicts for p in v.adjusted] == pytest.approx(holm_bonferroni(raw))
    assert [v.p_values for v in verdicts] == [v.p_values for v in alone]
    edge = verdicts[1]
    assert edge.p_values[0] < 0.05 <= edge.adjusted[0], "significant alone, not in the family"
    assert alone[1].ppl_verdict.kind == "measured" and edge.ppl_verdict.kind == "noise"
    assert verdicts[0].ppl_verdict.kind == verdicts[0].bleu_verdict.kind == "agrees"
    for v in verdicts:
        for metric, verdict, p in (("ppl", v.ppl_verdict, v.adjusted[0]),
                                   ("BLEU", v.bleu_verdict, v.adjusted[1])):
            assert (verdict.kind == "noise") == (p >= 0.05), f"{v.name} {metric}"
    with pytest.raises(BookError, match=r"comparisons: expected one per variant \(3\)"):
        ablation_verdicts(base, variants, comparisons=[None])
    with pytest.raises(BookError, match="variants: expected a non-empty list"):
        ablation_verdicts(base, [])


def test_verdict_summary_groups_rows_by_verdict():
    base = _runs("base", [10.0, 10.2, 9.8], [20.0, 20.5, 19.5])
    verdicts = [
        row_verdict(base, _runs("h=1", [12.0, 12.3, 11.9], [19.9, 20.4, 19.8]),
                    paper_row="(A) h=1, d_k=d_v=512"),
        row_verdict(base, _runs("no dropout", [8.0, 8.1, 7.9], [25.0, 25.2, 24.9]),
                    paper_row="(D) P_drop=0.0"),
    ]
    text = verdict_summary(verdicts)
    assert "Measured, in the paper's direction: h=1 (perplexity)." in text
    assert "Measured, against the paper's direction: no dropout (perplexity, BLEU)." in text
    assert "Not measured" in text and "h=1 (BLEU)" in text
    assert text.endswith("In all, 3 of 4 comparisons are measured changes, 1 of them in the "
                         "paper's direction.")
    with pytest.raises(BookError, match="verdicts: expected a non-empty list"):
        verdict_summary([])


def test_verdict_rows_show_each_metrics_tests_and_verdicts():
    base = _runs("base", [10.0, 10.2, 9.8], [20.0, 20.5, 19.5])
    paired = SimpleNamespace(delta=-5.0, p_value=0.001, interval=(-6.25, -3.5))
    verdicts = ablation_verdicts(
        base, [_runs("h=1", [12.0, 12.3, 11.9], [15.0, 15.5, 14.8]),
               _runs("pos", [8.0, 8.1, 7.9], [20.1, 19.6, 20.3])],
        comparisons=[paired, None], paper_rows=["(A) h=1, d_k=d_v=512", None])
    ppl = Table(*verdict_rows(verdicts, "perplexity"), caption="validation")
    assert ppl.columns == ["variant", "Δppl (%)", "95% CI", "Welch p", "adjusted p",
                           "verdict"]
    low, high = verdicts[0].ppl.interval
    assert ppl.rows[0] == ["h=1", f"{verdicts[0].ppl.delta:+.1f}",
                           f"{low:+.1f} to {high:+.1f}", f"{verdicts[0].ppl.p_value:.3f}",
                           f"{verdicts[0].adjusted[0]:.3f}", "agrees (hurts)"]
    assert str(ppl).startswith("validation\nvariant") and "<table" in ppl._repr_html_()
    bleu = Table(*verdict_rows(verdicts, "BLEU"))
    assert bleu.rows[0][4:] == ["-6.25 to -3.50", "0.001", f"{verdicts[0].adjusted[1]:.3f}",
                                "agrees (hurts)"]
    assert bleu.rows[1][4:6] == ["–", "–"], "no sentence test: no sentence columns"
    assert max(len(line) for line in str(ppl).splitlines()) <= 88
    single = row_verdict(_runs("base", [10.0], [20.0]), _runs("x", [11.0], [19.0]))
    assert verdict_rows([single], "perplexity")[1][0][2:5] == [None, None, None]
    with pytest.raises(BookError, match="metric: expected one of"):
        verdict_rows(verdicts, "chrF")
    with pytest.raises(BookError, match="verdicts: expected a non-empty list"):
        verdict_rows([], "BLEU")


@pytest.mark.slow
def test_run_ablation_reads_finished_runs_from_its_cache(tiny_data, tmp_path, monkeypatch):
    settings = dict(steps=2, seeds=(0, 1), max_tokens=64, warmup_steps=2, bleu_sentences=3,
                    device="cpu")
    variants = {"base": {}, "h=1": {"num_heads": 1}}
    config = _config(tiny_data)
    trained = run_ablation(variants, config, tiny_data, cache=tmp_path, **settings)
    assert len(list(tmp_path.glob("run-*.json"))) == 4

    def no_training(*args, **kwargs):
        raise AssertionError("trained a run the cache holds")

    with monkeypatch.context() as patch:
        patch.setattr(ablation, "train_variant", no_training)
        again = run_ablation({"renamed": {}, "h=1": {"num_heads": 1}}, config, tiny_data,
                             cache=tmp_path, **settings)
        with pytest.raises(AssertionError, match="cache holds"):  # another step count
            run_ablation(variants, config, tiny_data, cache=tmp_path, **{**settings,
                                                                         "steps": 3})
    assert again["renamed"].run(1) == dataclasses.replace(trained["base"].run(1),
                                                          name="renamed")
    assert again["h=1"].runs == trained["h=1"].runs
    key = ablation.run_key(config, tiny_data, steps=2, seed=0, max_tokens=64, device="cpu")
    assert key != ablation.run_key(config, tiny_data, steps=2, seed=1, max_tokens=64,
                                   device="cpu")
    assert key != ablation.run_key(config.replace(dropout=0.3), tiny_data, steps=2, seed=0,
                                   max_tokens=64, device="cpu")
    with pytest.raises(BookError, match="cache: expected a folder"):
        run_ablation(variants, config, tiny_data, cache=3, **settings)


@pytest.mark.slow
def test_run_ablation_reads_recorded_runs_and_trains_the_rest(tiny_data, tmp_path,
                                                              monkeypatch):
    settings = dict(steps=2, seeds=(0,), max_tokens=64, warmup_steps=2, bleu_sentences=3,
                    device="cpu")
    config = _config(tiny_data)
    cache = tmp_path / "cache"
    trained = run_ablation({"base": {}}, config, tiny_data, cache=cache, **settings)
    script = Path(__file__).resolve().parents[1] / "scripts" / "record_ablation_runs.py"
    spec = importlib.util.spec_from_file_location("record_ablation_runs", script)
    recorder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recorder)
    results = tmp_path / "results"
    assert recorder.main(["--cache", str(cache), "--name", "t", "--results", str(results)]) == 0
    assert recorder.main(["--cache", str(tmp_path / "none"), "--name", "t",
                          "--results", str(results)]) == 2
    recorded = ablation.recorded_runs("ablation-runs-t", results)
    assert len(recorded) == 1
    assert ablation.recorded_runs("ablation-runs-other", results) == {}
    calls = []
    real = ablation.train_variant

    def counting(*args, **kwargs):
        calls.append(kwargs.get("name"))
        return real(*args, **kwargs)

    monkeypatch.setattr(ablation, "train_variant", counting)
    again = run_ablation({"base": {}, "h=1": {"num_heads": 1}}, config, tiny_data,
                         recorded=recorded, **settings)
    assert calls == ["h=1"], "the recorded run is read, the other trained"
    assert again["base"].runs == trained["base"].runs
    with pytest.raises(BookError, match="recorded: expected a dict"):
        run_ablation({"base": {}}, config, tiny_data, recorded=[1], **settings)


@pytest.mark.slow
def test_verdicts_take_the_sentence_test_of_trained_seed_pairs(tiny_data):
    runs = run_ablation({"base": {}, "eps=0.3": {"label_smoothing": 0.3}}, _config(tiny_data),
                        tiny_data, steps=2, seeds=(0, 1), max_tokens=64, warmup_steps=2,
                        bleu_sentences=len(tiny_data.val_src), device="cpu")
    base, variant = runs["base"], runs["eps=0.3"]
    refs = tiny_data.val_references[:len(base.run(0).translations)]
    test = seed_paired_bleu([r.translations for r in base.runs],
                            [r.translations for r in variant.runs], refs, resamples=100)
    assert test.delta == pytest.approx(mean_sd(variant.bleu)[0] - mean_sd(base.bleu)[0])
    (verdict,) = ablation_verdicts(base, [variant], comparisons=[test],
                                   paper_rows=["(D) ε_ls=0.2"])
    assert verdict.comparison is test
    assert verdict.bleu_verdict.kind in {"agrees", "disagrees", "new", "noise"}
    assert verdict.ppl.n_base == verdict.ppl.n_variant == 2
