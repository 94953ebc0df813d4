"""Evaluating a run: corpus BLEU (the same numbers and signatures as sacreBLEU itself) and
the checkpoints whose average is evaluated (Section 6.1)."""

from __future__ import annotations

import pytest
import torch
from sacrebleu.metrics import BLEU

from transformer_book.data.tokenizer import BPETokenizer
from transformer_book.inference.averaging import average_checkpoints
from transformer_book.inference.scoring import BleuResult, corpus_bleu
from transformer_book.inference.trained import load_trained
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.run.checkpoint import checkpoint_name, save_checkpoint
from transformer_book.run.config import RunConfig
from transformer_book.util.validation import BookError

HYPOTHESES = [
    "A man in an orange hat starring at something.",
    "a Boston terrier is running on lush green grass in front of a white fence.",
    "A girl in karate uniform breaking a stick with a front kick.",
    "Five people in winter jackets and helmets stand in the snow.",
]
REFERENCES = [
    "A man in an orange hat staring at something.",
    "A Boston Terrier is running on lush green grass in front of a white fence.",
    "A girl in karate uniform breaking a stick with a front kick.",
    "Five people wearing winter jackets and helmets stand in the snow, with snowmobiles.",
]


def test_matches_sacrebleu():
    result = corpus_bleu(HYPOTHESES, REFERENCES)
    expected = BLEU().corpus_score(HYPOTHESES, [REFERENCES])
    assert result.score == pytest.approx(expected.score)
    assert result.precisions == pytest.approx(expected.precisions)
    assert result.brevity_penalty == pytest.approx(expected.bp)
    assert (result.hyp_len, result.ref_len) == (expected.sys_len, expected.ref_len)
    assert result.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    lowercase = BLEU(lowercase=True, tokenize="intl")
    score = lowercase.corpus_score(HYPOTHESES, [REFERENCES]).score
    assert result.lowercase_intl_score == pytest.approx(score)
    assert result.lowercase_intl_signature == str(lowercase.get_signature())
    assert "case:lc" in result.lowercase_intl_signature
    assert "tok:intl" in result.lowercase_intl_signature
    # Casing differences ("a Boston terrier") cost points only in the cased score.
    assert result.lowercase_intl_score > result.score
    assert result.num_sentences == 4


def test_identity_scores_100():
    result = corpus_bleu(REFERENCES, REFERENCES)
    assert result.score == pytest.approx(100.0)
    assert result.lowercase_intl_score == pytest.approx(100.0)


def test_str_is_one_line_report():
    text = str(corpus_bleu(HYPOTHESES, REFERENCES))
    assert "\n" not in text
    assert text.startswith("BLEU ") and "tok:13a" in text and "lowercase intl" in text


def test_result_is_a_dataclass():
    result = corpus_bleu(["a b c d"], ["a b c d"])
    assert isinstance(result, BleuResult)


@pytest.mark.parametrize(
    ("hypotheses", "references", "match"),
    [
        (["a", "b"], ["a"], r"references: expected 2 sentences \(one per hypothesis\), received 1"),
        ([], [], r"hypotheses: expected at least one sentence, received an empty list"),
        (["a"], [], r"references: expected at least one sentence"),
        ("a sentence", ["a"], r"hypotheses: expected a list of strings, received str"),
        (["a", None], ["a", "b"], r"hypotheses: expected only strings, received non-strings "
                                  r"at positions \[1\]"),
    ],
)
def test_bad_inputs(hypotheses, references, match):
    with pytest.raises(BookError, match=match):
        corpus_bleu(hypotheses, references)


# ------------------------------------------------------------- averaged checkpoints (6.1)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run folder with checkpoints at steps 1 to 4 of one tiny (untrained) model."""
    folder = tmp_path_factory.mktemp("run")
    tokenizer = BPETokenizer.train(REFERENCES * 3, vocab_size=300, min_frequency=1)
    tokenizer.save(folder / "tokenizer.json")
    run = RunConfig.from_dict({"model": {"preset": "tiny", "max_len": 40}})
    config = TransformerConfig.preset("tiny", tokenizer.vocab_size, dropout=0.0, max_len=40)
    for step in (1, 2, 3, 4):
        torch.manual_seed(step)
        save_checkpoint(folder / checkpoint_name(step), Transformer(config), step=step,
                        config={"model": config.to_dict(), "run": run.to_dict()},
                        tokenizer_path=folder / "tokenizer.json")
    return folder


def _steps(trained):
    return [int(p.name.split("_")[1]) for p in trained.checkpoints]


def test_average_ends_at_the_named_checkpoint(run_dir):
    """`evaluate --checkpoint runs/x/step_3 --average 2` averages steps 2 and 3 (it used to
    take the newest two of the run, 3 and 4, while reporting step 3)."""
    named = load_trained(run_dir / checkpoint_name(3), average=2)
    assert named.step == 3 and _steps(named) == [2, 3]
    expected = average_checkpoints([run_dir / checkpoint_name(2), run_dir / checkpoint_name(3)])
    for name, value in named.model.state_dict().items():
        torch.testing.assert_close(value, expected[name], rtol=0, atol=0)
    newest = load_trained(run_dir, average=3)
    assert newest.step == 4 and _steps(newest) == [2, 3, 4], "a run folder: its newest"
    assert _steps(load_trained(run_dir / checkpoint_name(4), average=4)) == [1, 2, 3, 4]
    with pytest.raises(BookError, match=r"average: expected at most the 2 checkpoints of "
                                         r".* up to and including step_00000002, received 3"):
        load_trained(run_dir / checkpoint_name(2), average=3)


@pytest.mark.parametrize(("device", "match"), [
    ("tpu", r"device: expected cpu, cuda, cuda:N or mps, received 'tpu'"),
    ("meta", r"device: expected cpu, cuda, cuda:N or mps, received 'meta'"),
    ("cuda:99", r"device: expected a device this machine has \(cpu\), received 'cuda:99'"),
])
def test_load_trained_checks_the_device_first(run_dir, device, match):
    with pytest.raises(BookError, match=match):
        load_trained(run_dir, device=device)
