"""Evaluating a run: corpus BLEU, chrF++ and TER (the same numbers and signatures as
sacreBLEU itself), the checkpoints whose average is evaluated (Section 6.1) and how the
checkpoint is chosen on validation (``select``)."""

from __future__ import annotations

import pytest
import torch
from sacrebleu.metrics import BLEU, CHRF, TER

from transformer_book.data.tokenizer import BPETokenizer
from transformer_book.inference.averaging import average_checkpoints
from transformer_book.inference.scoring import CorpusScores, score_corpus
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
    result = score_corpus(HYPOTHESES, REFERENCES)
    expected = BLEU().corpus_score(HYPOTHESES, [REFERENCES])
    assert result.bleu == pytest.approx(expected.score)
    assert result.precisions == pytest.approx(expected.precisions)
    assert result.brevity_penalty == pytest.approx(expected.bp)
    assert (result.hyp_len, result.ref_len) == (expected.sys_len, expected.ref_len)
    assert result.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    lowercase = BLEU(lowercase=True, tokenize="intl")
    score = lowercase.corpus_score(HYPOTHESES, [REFERENCES]).score
    assert result.bleu_lowercase_intl == pytest.approx(score)
    assert result.bleu_lowercase_intl_signature == str(lowercase.get_signature())
    assert "case:lc" in result.bleu_lowercase_intl_signature
    assert "tok:intl" in result.bleu_lowercase_intl_signature
    # Casing differences ("a Boston terrier") cost points only in the cased score.
    assert result.bleu_lowercase_intl > result.bleu
    assert result.num_sentences == 4


def test_chrf_plus_plus_and_ter_match_sacrebleu():
    result = score_corpus(HYPOTHESES, REFERENCES)
    chrf, ter = CHRF(word_order=2), TER()
    assert result.chrf == pytest.approx(chrf.corpus_score(HYPOTHESES, [REFERENCES]).score)
    assert result.ter == pytest.approx(ter.corpus_score(HYPOTHESES, [REFERENCES]).score)
    assert result.chrf_signature == str(chrf.get_signature())
    assert result.ter_signature == str(ter.get_signature())
    assert "nc:6|nw:2" in result.chrf_signature, "chrF++: character 6-grams, word bigrams"
    assert "tok:tercom" in result.ter_signature
    assert 0 < result.chrf < 100 and 0 < result.ter < 100


def test_other_metrics_can_be_left_out():
    """Training's greedy BLEU checks compute BLEU alone."""
    result = score_corpus(HYPOTHESES, REFERENCES, other_metrics=False)
    assert result.bleu == score_corpus(HYPOTHESES, REFERENCES).bleu
    assert (result.chrf, result.chrf_signature, result.ter, result.ter_signature) == (
        None, None, None, None)
    assert "chrF" not in str(result) and "TER" not in str(result)
    with pytest.raises(BookError, match=r"other_metrics: expected True or False"):
        score_corpus(HYPOTHESES, REFERENCES, other_metrics="no")


def test_identity_scores_100():
    result = score_corpus(REFERENCES, REFERENCES)
    assert result.bleu == pytest.approx(100.0)
    assert result.bleu_lowercase_intl == pytest.approx(100.0)
    assert result.chrf == pytest.approx(100.0)
    assert result.ter == pytest.approx(0.0), "no edit needed"


def test_str_is_one_line_report():
    text = str(score_corpus(HYPOTHESES, REFERENCES))
    assert "\n" not in text
    assert text.startswith("BLEU ") and "tok:13a" in text and "lowercase intl" in text
    assert "chrF++ " in text and "nw:2" in text and "TER " in text and "tok:tercom" in text


def test_result_is_a_dataclass():
    result = score_corpus(["a b c d"], ["a b c d"])
    assert isinstance(result, CorpusScores)


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
        score_corpus(hypotheses, references)


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


# ------------------------------------------------------- choosing the checkpoint on val


#: The evaluations the training loop recorded: steps 10-50 are kept; 25 was pruned (its
#: val loss is the lowest of all, but there is no checkpoint of it to load).
EVALS = [{"step": 10, "val_loss": 5.0, "bleu": 1.0}, {"step": 20, "val_loss": 3.1, "bleu": 9.0},
         {"step": 25, "val_loss": 1.0, "bleu": 50.0}, {"step": 30, "val_loss": 2.9, "bleu": 7.0},
         {"step": 40, "val_loss": 3.0, "bleu": 8.0}, {"step": 50, "val_loss": 3.2, "bleu": 6.0}]


def _save_run(folder, steps, evals=None):
    """Checkpoints of one tiny model at ``steps``; the newest records ``evals`` (as
    ``Session.save`` does: every evaluation so far)."""
    tokenizer = BPETokenizer.train(REFERENCES * 3, vocab_size=300, min_frequency=1)
    tokenizer.save(folder / "tokenizer.json")
    run = RunConfig.from_dict({"model": {"preset": "tiny", "max_len": 40}})
    config = TransformerConfig.preset("tiny", tokenizer.vocab_size, dropout=0.0, max_len=40)
    for step in steps:
        torch.manual_seed(step)
        so_far = [e for e in evals or [] if e["step"] <= step]
        save_checkpoint(folder / checkpoint_name(step), Transformer(config), step=step,
                        config={"model": config.to_dict(), "run": run.to_dict()},
                        tokenizer_path=folder / "tokenizer.json",
                        extra={"evals": so_far} if evals is not None else None)
    return folder


@pytest.fixture(scope="module")
def evaluated_run(tmp_path_factory):
    return _save_run(tmp_path_factory.mktemp("evaluated"), (10, 20, 30, 40, 50), EVALS)


@pytest.mark.parametrize(("select", "average", "chosen", "averaged", "loss", "bleu"), [
    ("best-val", None, 30, [30], 2.9, 7.0),
    ("best-val-bleu", None, 20, [20], 3.1, 9.0),
    ("best-val", 3, 30, [20, 30, 40], 2.9, 7.0),
    ("best-val", 2, 30, [20, 30], 2.9, 7.0),  # 20 and 40 equally near: the earlier
    ("best-val-bleu", 4, 20, [10, 20, 30, 40], 3.1, 9.0),
    ("best-val", 5, 30, [10, 20, 30, 40, 50], 2.9, 7.0),
    ("last", None, 50, [50], 3.2, 6.0),
    ("last", 2, 50, [40, 50], 3.2, 6.0),
])
def test_select_chooses_among_kept_checkpoints_by_val(evaluated_run, select, average, chosen,
                                                      averaged, loss, bleu):
    """The lowest val loss (step 25) was not kept: the choice is among loadable ones."""
    trained = load_trained(evaluated_run, average=average, select=select)
    assert trained.selection == {"select": select, "chosen_step": chosen,
                                 "chosen_val_loss": loss, "chosen_val_bleu": bleu,
                                 "averaged_steps": averaged}
    assert _steps(trained) == averaged and trained.step == max(averaged)
    expected = average_checkpoints([evaluated_run / checkpoint_name(s) for s in averaged])
    for name, value in trained.model.state_dict().items():
        torch.testing.assert_close(value, expected[name], rtol=0, atol=0)


def test_select_last_of_a_run_without_evals_records_none(run_dir):
    trained = load_trained(run_dir / checkpoint_name(3))
    assert trained.selection == {"select": "last", "chosen_step": 3, "chosen_val_loss": None,
                                 "chosen_val_bleu": None, "averaged_steps": [3]}


def test_select_ties_go_to_the_earlier_step(tmp_path):
    evals = [{"step": s, "val_loss": 2.0, "bleu": 4.0} for s in (1, 2, 3)]
    folder = _save_run(tmp_path, (1, 2, 3), evals)
    assert load_trained(folder, select="best-val").selection["chosen_step"] == 1
    assert load_trained(folder, select="best-val-bleu").selection["chosen_step"] == 1


def test_select_needs_a_run_folder_with_evaluations(run_dir, evaluated_run, tmp_path):
    with pytest.raises(BookError, match=r"checkpoint: expected a run folder for "
                                         r"select='best-val' .*a checkpoint folder"):
        load_trained(evaluated_run / checkpoint_name(30), select="best-val")
    with pytest.raises(BookError, match=r"checkpoint: expected a run folder whose newest "
                                         r"checkpoint records the training's evaluations"):
        load_trained(run_dir, select="best-val")
    no_bleu = _save_run(tmp_path, (1, 2), [{"step": 1, "val_loss": 3.0},
                                           {"step": 2, "val_loss": 2.0}])
    assert load_trained(no_bleu, select="best-val").selection["chosen_step"] == 2
    with pytest.raises(BookError, match=r"with a recorded bleu at its step .*received none "
                                         r"among steps \[1, 2\]"):
        load_trained(no_bleu, select="best-val-bleu")
    with pytest.raises(BookError, match=r"select: expected one of \['last', 'best-val', "
                                         r"'best-val-bleu'\], received 'best'"):
        load_trained(evaluated_run, select="best")
    with pytest.raises(BookError, match=r"average: expected at most the 5 kept checkpoints"):
        load_trained(evaluated_run, select="best-val", average=6)
