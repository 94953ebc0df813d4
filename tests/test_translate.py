"""Translating with a model: translate_ids (batching, per-sentence length limits, one value
check per call) and load_trained (one checkpoint or the average of the last few)."""

from __future__ import annotations

import pytest
import torch

from transformer_book.data.tokenizer import BPETokenizer
from transformer_book.inference.averaging import average_checkpoints
from transformer_book.inference.beam import Beam, beam_search
from transformer_book.inference.greedy import greedy_decode
from transformer_book.inference.trained import load_trained, resolve_checkpoint
from transformer_book.inference.translate import encode_sources, translate, translate_ids
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.run.checkpoint import checkpoint_name, list_checkpoints, save_checkpoint
from transformer_book.run.config import RunConfig
from transformer_book.util.validation import BookError

TEXTS = ["ein Mann fährt Fahrrad", "zwei Hunde spielen im Schnee", "a man rides a bike",
         "two dogs play in the snow"] * 5


def _tiny(vocab: int, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig.preset("tiny", vocab, dropout=0.0, max_len=40)
    return Transformer(config).eval()


@pytest.fixture(scope="module")
def model() -> Transformer:
    return _tiny(24, seed=3)


def _sources(n: int = 9, seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 12, (n,), generator=generator).tolist()
    return [torch.randint(4, 24, (k,), generator=generator).tolist() for k in lengths]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_each_translation_is_the_sentence_decoded_alone(model, beam_size):
    """Limits are per sentence, so batching (here by a small max_tokens) changes nothing."""
    sources = _sources()
    batched = translate_ids(model, sources, Beam(beam_size), max_len_a=0.5, max_len_b=3)
    few = translate_ids(model, sources, Beam(beam_size), max_len_a=0.5, max_len_b=3,
                        max_tokens=12)
    for source, out, other in zip(sources, batched, few, strict=True):
        src = torch.tensor([source])
        if beam_size == 1:
            alone = greedy_decode(model, src, max_len_a=0.5, max_len_b=3)[0]
        else:
            alone = beam_search(model, src, beam_size=3, max_len_a=0.5, max_len_b=3)[0]
        assert out == other == alone
        assert len(out) <= int(0.5 * len(source) + 3)


def test_translate_ids_keeps_the_model_mode_and_the_input_order(model):
    model.train()
    sources = _sources()
    out = translate_ids(model, sources[::-1], max_len_b=4)
    assert out[::-1] == translate_ids(model, sources, max_len_b=4)
    assert model.training, "the caller's mode comes back"
    model.eval()
    assert translate_ids(model, []) == []


@pytest.mark.parametrize(
    ("sources", "kwargs", "match"),
    [
        ([[4, 99]], {}, r"sources: expected token ids in \[0, vocab_size=24\)"),
        ([list(range(4, 24)) * 3], {}, r"sources: expected at most max_len=40 positions"),
        ([[4]], {"beam_size": 0}, r"beam_size: expected an integer >= 1, received 0"),
        ([[4]], {"beam_size": 25}, r"beam_size: expected an integer >= 1 and <= 24, "
                                   r"received 25"),
        ([[4]], {"alpha": "0.6"}, r"alpha: expected a finite number >= 0 and <= 10, "
                                  r"received '0.6'"),
        # greedy decoding does not use alpha, but what it is given must be usable
        ([[4]], {"beam_size": 1, "alpha": -0.5}, r"alpha: expected a finite number >= 0 and "
                                                 r"<= 10, received -0.5"),
        ([[4]], {"beam_size": 1, "alpha": float("inf")}, r"alpha: expected a finite number"),
        ([[4]], {"beam_size": 2, "alpha": 1000.0}, r"alpha: expected a finite number"),
        ([[4]], {"max_len_b": -10}, r"max_len_b: expected an integer >= 0, received -10"),
        ([[4]], {"max_tokens": -1}, r"max_tokens: expected an integer >= 1"),
        ([[4]], {"device": "tpu"}, r"device: expected a torch device such as cpu, cuda, cuda:1 "
                                   r"or mps, received 'tpu'"),
        ([[4]], {"device": 5}, r"device: expected "),  # cuda:5 where torch has CUDA
        ([[4]], {"device": "meta"}, r"device: expected the model's device \(cpu\) or None, "
                                    r"received 'meta'"),
        ([[4]], {"device": "cpu:1"}, r"device: expected the model's device \(cpu\)"),
        ([[4]], {"max_len_a": -1.0}, r"max_len_a: expected a finite number >= 0"),
        ([[4]], {"max_len_b": 1.5}, r"max_len_b: expected an integer >= 0, received 1.5"),
        ([[4]], {"max_tokens": 0}, r"max_tokens: expected an integer >= 1"),
        ([[4]], {"stop": "early"}, r"stop: expected one of \['exact', 'k_finished'\]"),
        ("4 5", {}, r"sources: expected a list of BPE id lists, received str"),
        ([[4, 5.5]], {}, r"sources: expected lists of integer token ids, received .*float"),
        ([[4], [[5]]], {}, r"sources: expected lists of integer token ids"),
    ],
)
def test_translate_ids_refuses_bad_input_before_decoding(model, sources, kwargs, match):
    """Beam search's settings go to the strategy (Beam), the others to translate_ids."""
    beam = {k: v for k, v in kwargs.items() if k in ("beam_size", "alpha", "stop")}
    others = {k: v for k, v in kwargs.items() if k not in beam}
    with pytest.raises(BookError, match=match):
        translate_ids(model, sources, Beam(**beam) if beam else None, **others)


def test_translate_ids_refuses_a_model_that_is_no_transformer(model):
    with pytest.raises(BookError, match="model: expected a transformer_book Transformer, "
                                        "received Linear"):
        translate_ids(torch.nn.Linear(2, 2), [[4]])


def test_translate_ids_checks_the_values_once_per_call(model, monkeypatch):
    calls = []
    real = Transformer.check_ids

    def counting(self, ids, name, *args, **kwargs):
        calls.append(name)
        return real(self, ids, name, *args, **kwargs)

    monkeypatch.setattr(Transformer, "check_ids", counting)
    translate_ids(model, _sources(30), max_len_b=2, max_tokens=20)
    assert calls.count("sources") == 1


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run folder with three checkpoints of one tiny model and its tokenizer."""
    folder = tmp_path_factory.mktemp("run")
    tokenizer = BPETokenizer.train(TEXTS, vocab_size=300, min_frequency=1)
    tokenizer.save(folder / "tokenizer.json")
    run = RunConfig.from_dict({"model": {"preset": "tiny", "max_len": 40},
                               "decode": {"beam_size": 2, "max_len_b": 5}})
    for step in (1, 2, 3):
        net = _tiny(tokenizer.vocab_size, seed=step)
        save_checkpoint(folder / checkpoint_name(step), net, step=step,
                        config={"model": net.config.to_dict(), "run": run.to_dict()},
                        tokenizer_path=folder / "tokenizer.json")
    return folder


def test_load_trained_takes_the_newest_checkpoint_or_an_average(run_dir):
    assert resolve_checkpoint(run_dir) == run_dir / "step_00000003"
    trained = load_trained(run_dir)
    assert trained.step == 3 and trained.checkpoints == [run_dir / "step_00000003"]
    assert not trained.model.training
    averaged = load_trained(run_dir, average=2)
    assert averaged.checkpoints == list_checkpoints(run_dir)[-2:]
    expected = average_checkpoints(list_checkpoints(run_dir)[-2:])
    for name, value in averaged.model.state_dict().items():
        torch.testing.assert_close(value, expected[name], rtol=0, atol=0)
    with pytest.raises(BookError, match=r"average: expected at most the 3 checkpoints"):
        load_trained(run_dir, average=4)
    with pytest.raises(BookError, match=r"average: expected an integer >= 1, received 0"):
        load_trained(run_dir, average=0)
    with pytest.raises(BookError, match=r"checkpoint: expected an existing checkpoint"):
        load_trained(run_dir / "missing")


def test_translate_uses_the_run_config_and_refuses_empty_sentences(run_dir):
    trained = load_trained(run_dir)
    ids = encode_sources(trained.tokenizer, TEXTS[:3], trained.model_config.max_len)
    expected = translate_ids(trained.model, ids, Beam(beam_size=2), max_len_b=5)
    assert translate(trained, TEXTS[:3]) == [trained.tokenizer.decode(row) for row in expected]
    with pytest.raises(BookError, match=r"sentences\[1\]: expected a non-empty sentence"):
        translate(trained, ["ein Mann", "  "])
    with pytest.raises(BookError, match=r"sentences\[0\]: expected at most 40 BPE tokens"):
        translate(trained, ["ein Mann fährt Fahrrad " * 20])
    with pytest.raises(BookError, match=r"sentences\[1\]: expected text that UTF-8 can encode, "
                                        r"received '\\ud800' at position 4"):
        translate(trained, ["ein Mann", "ein \ud800 Hund"])
    vocab = trained.model_config.vocab_size
    with pytest.raises(BookError, match=rf"beam_size: expected an integer >= 1 and <= {vocab}"):
        translate(trained, TEXTS[:1], beam_size=vocab + 1)
    with pytest.raises(BookError, match=r"alpha: expected a finite number >= 0 and <= 10"):
        translate(trained, TEXTS[:1], alpha=float("inf"))
    with pytest.raises(BookError, match=r"max_tokens: expected an integer >= 1, received 0"):
        translate(trained, TEXTS[:1], max_tokens=0)
