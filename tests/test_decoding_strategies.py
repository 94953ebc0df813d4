"""The decoding seam: strategies as step rules of one loop, chosen by name from one
registry; a new strategy added by one registration line; sampling with temperature and top-p and its
invariants (a tiny temperature or top_p is greedy, a seed fixes the output, nothing is
drawn outside the nucleus), and its bad settings."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

from transformer_book.data.tokenizer import BPETokenizer
from transformer_book.inference import decoding
from transformer_book.inference.beam import Beam, beam_search
from transformer_book.inference.decoding import (
    Sampling,
    decoding_strategy,
    nucleus,
    sample_tokens,
    strategy_name,
)
from transformer_book.inference.generate import Limits, StepRule, generate
from transformer_book.inference.greedy import Greedy, greedy_decode
from transformer_book.inference.trained import TrainedModel
from transformer_book.inference.translate import encode_sources, translate, translate_ids
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.run.config import DECODING_STRATEGIES, RunConfig
from transformer_book.util.validation import BookError

V = 30
TEXTS = ["ein Mann fährt Fahrrad", "zwei Hunde spielen im Schnee", "a man rides a bike",
         "two dogs play in the snow", "eine Frau singt ein Lied"] * 4


def _model(seed: int = 0, vocab: int = V) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(TransformerConfig.preset("tiny", vocab, dropout=0.0, max_len=40)).eval()


def _sources(n: int = 8, seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 10, (n,), generator=generator).tolist()
    return [torch.randint(4, V, (k,), generator=generator).tolist() for k in lengths]


@pytest.fixture(scope="module")
def trained() -> TrainedModel:
    """An untrained tiny model with a BPE of the texts above, ready for translate()."""
    tokenizer = BPETokenizer.train(TEXTS, vocab_size=300, min_frequency=1)
    model = _model(1, tokenizer.vocab_size)
    run = RunConfig.from_dict({"model": {"preset": "tiny", "max_len": 40},
                               "decode": {"beam_size": 2, "max_len_a": 0.5, "max_len_b": 4}})
    return TrainedModel(model=model, tokenizer=tokenizer, model_config=model.config,
                        run_config=run)


@dataclass(frozen=True)
class SecondBest(StepRule):
    """A strategy only a test would want: the second most probable token at every step."""

    def step(self, t: int, logp: torch.Tensor, scores: torch.Tensor, state: object
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        values, tokens = logp[:, 0].topk(2, dim=-1)  # (B, 2)
        return scores + values[:, 1:], tokens[:, 1:], torch.zeros_like(tokens[:, 1:])


@pytest.fixture
def second_best():
    """SecondBest registered for one test: the one line a new strategy needs."""
    DECODING_STRATEGIES.register("second_best", SecondBest)
    yield SecondBest
    DECODING_STRATEGIES.unregister("second_best")


# ----------------------------------------------------------------------------- the seam


def test_the_registry_names_the_three_strategies() -> None:
    assert dict(DECODING_STRATEGIES.items()) == {"beam": Beam, "greedy": Greedy,
                                                 "sample": Sampling}
    for name in DECODING_STRATEGIES:
        strategy = decoding_strategy(name)
        assert isinstance(strategy, StepRule) and strategy_name(strategy) == name
    assert decoding_strategy("beam", beam_size=3, alpha=0.0) == Beam(3, 0.0)


def test_a_new_strategy_is_one_registration_line(second_best, trained) -> None:
    texts = translate(trained, TEXTS[:4], "second_best")
    ids = encode_sources(trained.tokenizer, TEXTS[:4], 40)
    by_hand = translate_ids(trained.model, ids, SecondBest(), max_len_a=0.5, max_len_b=4)
    assert texts == [trained.tokenizer.decode(row) for row in by_hand]
    greedy = translate(trained, TEXTS[:4], "greedy")
    assert texts != greedy, "another rule, other translations"
    # Its first token is the second best of greedy's first step, by the model's scores.
    model = trained.model
    src = torch.tensor([ids[0]])
    with torch.no_grad():
        logits = model.decode(torch.tensor([[model.config.bos_id]]), model.encode(src), src)
    logits[0, -1, [model.config.pad_id, model.config.bos_id]] = -math.inf
    second = int(logits[0, -1].topk(2).indices[1])
    assert by_hand[0][:1] == ([] if second == model.config.eos_id else [second])
    assert strategy_name(SecondBest()) == "second_best"


def test_translate_picks_the_strategy_by_name_with_the_configs_defaults(trained) -> None:
    ids = encode_sources(trained.tokenizer, TEXTS[:5], 40)
    limits = {"max_len_a": 0.5, "max_len_b": 4}
    as_text = [trained.tokenizer.decode(row) for row in
               translate_ids(trained.model, ids, Beam(beam_size=2, alpha=0.6), **limits)]
    assert translate(trained, TEXTS[:5]) == as_text, "beam search of the config's [decode]"
    greedy = [trained.tokenizer.decode(row) for row in translate_ids(trained.model, ids, **limits)]
    assert translate(trained, TEXTS[:5], beam_size=1) == greedy, "a beam of one is greedy"
    assert translate(trained, TEXTS[:5], "greedy") == greedy
    assert translate(trained, TEXTS[:5], Greedy()) == greedy
    sampled = translate(trained, TEXTS[:5], "sample", seed=4, temperature=0.7, top_p=0.9)
    assert sampled == translate(trained, TEXTS[:5], "sample", seed=4, temperature=0.7,
                                top_p=0.9)


def test_unknown_strategies_and_settings_are_refused(trained) -> None:
    for call, argument in (
            (lambda: decoding_strategy("nucleus"), "strategy"),
            (lambda: decoding_strategy("sample", beam_size=4), "strategy 'sample'"),
            (lambda: translate(trained, TEXTS[:1], "greedy", alpha=0.6), "strategy 'greedy'"),
            (lambda: translate(trained, TEXTS[:1], Greedy(), alpha=0.6), "settings"),
            (lambda: translate_ids(trained.model, [[5, 6]], "beam"), "strategy")):
        with pytest.raises(BookError) as refused:
            call()
        assert str(refused.value).startswith(f"{argument}: expected"), str(refused.value)


def test_greedy_and_beam_on_the_seam_are_the_searches_themselves() -> None:
    model = _model(2)
    src = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    limits = Limits(1.0, 5)
    assert generate(model, src, Greedy(), limits) == greedy_decode(model, src, 1.0, 5)
    assert generate(model, src, Beam(3, 0.6), limits) == beam_search(model, src, 3, 0.6, 1.0, 5)
    assert generate(model, src, Beam(1, 0.6), limits) == greedy_decode(model, src, 1.0, 5)


# ----------------------------------------------------------------------------- sampling


def test_a_tiny_temperature_or_top_p_is_greedy_search() -> None:
    model, sources = _model(3), _sources()
    greedy = translate_ids(model, sources, max_len_b=6)
    for strategy in (Sampling(temperature=1e-6, seed=1), Sampling(top_p=1e-9, seed=2),
                     Sampling(temperature=1e-4, top_p=1e-9, seed=3)):
        assert translate_ids(model, sources, strategy, max_len_b=6) == greedy, strategy


def test_the_same_seed_gives_the_same_translations_and_others_differ() -> None:
    model, sources = _model(4), _sources(12)
    draws = [translate_ids(model, sources, Sampling(temperature=1.5, top_p=0.95, seed=s),
                           max_len_b=6) for s in (7, 7, 8)]
    assert draws[0] == draws[1], "same seed, same output"
    assert draws[0] != draws[2], "another seed, another sample"
    model.train()  # dropout 0 here, but decoding must put the model in eval mode anyway
    assert translate_ids(model, sources, Sampling(seed=7, temperature=1.5, top_p=0.95),
                         max_len_b=6) == draws[0]
    assert model.training, "the caller's mode comes back"


def test_top_p_never_samples_outside_the_nucleus() -> None:
    """A fixed distribution p = (0.05, 0.5, 0.3, 0.15): the nucleus of 0.7 is {1, 2} (0.5
    alone falls short), of 0.5 only {1}, of 0.85 {1, 2, 3}; renormalised inside it."""
    p = torch.tensor([[0.05, 0.5, 0.3, 0.15]], dtype=torch.float64)
    logp = p.log().expand(4000, -1)  # (4000, 4): one row per draw
    generator = torch.Generator().manual_seed(0)
    for top_p, inside in ((0.7, {1, 2}), (0.5, {1}), (0.85, {1, 2, 3}), (1.0, {0, 1, 2, 3})):
        probs = nucleus(logp[:1], 1.0, top_p)[0]
        expected = torch.zeros(4, dtype=torch.float64)
        expected[list(inside)] = p[0, list(inside)] / p[0, list(inside)].sum()
        torch.testing.assert_close(probs, expected)
        drawn = sample_tokens(logp, 1.0, top_p, generator)
        assert set(drawn.tolist()) == inside, (top_p, set(drawn.tolist()))
        share = (drawn == 1).double().mean().item()  # the top token's observed share
        assert abs(share - expected[1].item()) < 0.04, (top_p, share)
    # A temperature flattens or sharpens before the nucleus is cut.
    hot = nucleus(logp[:1], 100.0, 1.0)[0]
    assert float(hot.max() - hot.min()) < 0.01
    cold = nucleus(logp[:1], 1e-4, 1.0)[0]
    assert cold.tolist() == [0.0, 1.0, 0.0, 0.0]


def test_extreme_temperatures_and_top_p_sample_their_limits_without_nan() -> None:
    """A temperature or top_p that rounds to 0 in float32 is greedy search; a temperature
    past float32's range is the uniform limit (it used to divide into nan and crash)."""
    logp = torch.tensor([[-math.inf, -1.0, -0.5, -2.0]])  # float32, one token impossible
    for tiny in (1e-300, 1e-46):
        assert nucleus(logp, tiny, 1.0)[0].tolist() == [0.0, 0.0, 1.0, 0.0]
    assert nucleus(logp, 1.0, 1e-300)[0].tolist() == [0.0, 0.0, 1.0, 0.0]
    for huge in (1e39, 1e308):
        probs = nucleus(logp, huge, 1.0)[0]
        torch.testing.assert_close(probs, torch.tensor([0.0, 1 / 3, 1 / 3, 1 / 3]))
    model, sources = _model(3), _sources()
    greedy = translate_ids(model, sources, max_len_b=6)
    for strategy in (Sampling(temperature=1e-300, seed=1), Sampling(top_p=1e-300, seed=2)):
        assert translate_ids(model, sources, strategy, max_len_b=6) == greedy, strategy
    uniform = translate_ids(model, sources, Sampling(temperature=1e308, seed=2**63 - 1),
                            max_len_b=6)
    assert len(uniform) == len(greedy) and uniform != greedy


def test_the_nucleus_keeps_ties_to_the_lower_id_and_never_gives_nan() -> None:
    logp = torch.tensor([[-math.inf, -1.0, -1.0, -2.0, -math.inf]])
    assert nucleus(logp, 1.0, 1e-9)[0].tolist() == [0.0, 1.0, 0.0, 0.0, 0.0]
    probs = nucleus(logp, 1e-30, 1.0)  # (x - max) / T: -inf, never inf - inf
    assert not probs.isnan().any() and probs[0, 0] == 0.0 and probs[0, 4] == 0.0
    torch.testing.assert_close(probs[0, 1:3], torch.tensor([0.5, 0.5]))


@pytest.mark.parametrize(("settings", "match"), [
    ({"temperature": 0}, r"temperature: expected a finite number > 0, received 0"),
    ({"temperature": -1.0}, r"temperature: expected a finite number > 0, received -1.0"),
    ({"temperature": math.inf}, r"temperature: expected a finite number > 0, received inf"),
    ({"temperature": "1"}, r"temperature: expected a finite number > 0, received '1'"),
    ({"top_p": 0.0}, r"top_p: expected a finite number > 0 and <= 1, received 0.0"),
    ({"top_p": 1.5}, r"top_p: expected a finite number >= 0 and <= 1, received 1.5"),
    ({"top_p": -0.1}, r"top_p: expected a finite number >= 0 and <= 1, received -0.1"),
    ({"top_p": math.nan}, r"top_p: expected a finite number >= 0 and <= 1, received nan"),
    ({"seed": -1}, r"seed: expected an integer >= 0 and <= 9223372036854775807, received -1"),
    ({"seed": 1.5}, r"seed: expected an integer >= 0 and <= \d+, received 1.5"),
    ({"seed": 2**70}, r"seed: expected an integer >= 0 and <= 9223372036854775807"),
])
def test_bad_sampling_settings_are_refused(settings, match) -> None:
    with pytest.raises(BookError, match=match):
        Sampling(**settings)
    with pytest.raises(BookError, match=match):
        decoding_strategy("sample", **settings)


def test_the_module_documents_every_strategy() -> None:
    for cls in (Greedy, Beam, Sampling):
        assert cls.__name__ in (decoding.__doc__ or ""), cls.__name__
