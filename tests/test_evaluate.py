"""Evaluating a run: corpus BLEU, chrF++ and TER (the same numbers and signatures as
sacreBLEU itself), the checkpoints whose average is evaluated (Section 6.1), how the
checkpoint is chosen on validation (``select``), and ``inference.evaluate``, the one
evaluation every caller makes (its scores, interval, texts and decoding)."""

from __future__ import annotations

import importlib
import sys

import pytest
import sacrebleu
import torch
from sacrebleu.metrics import BLEU, CHRF, TER

from transformer_book.data.multi30k import load_multi30k
from transformer_book.data.tokenizer import BPETokenizer
from transformer_book.inference import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    Decoding,
    Evaluation,
    bootstrap_interval,
    evaluate,
    evaluation_record,
    translate,
)
from transformer_book.inference.averaging import average_checkpoints
from transformer_book.inference.beam import Beam
from transformer_book.inference.scoring import CorpusScores, score_corpus
from transformer_book.inference.trained import load_trained
from transformer_book.inference.translate import _batches
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.run.checkpoint import checkpoint_name, save_checkpoint
from transformer_book.run.config import RunConfig
from transformer_book.train.corpus import PreparedData
from transformer_book.train.validate import validation_bleu
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
    # checkpoints every 10 steps, as the steps of these runs are
    run = RunConfig.from_dict({"model": {"preset": "tiny", "max_len": 40},
                               "train": {"checkpoint_every": 10}})
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
    # checkpoints every 10 steps, as the steps of these runs are
    run = RunConfig.from_dict({"model": {"preset": "tiny", "max_len": 40},
                               "train": {"checkpoint_every": 10}})
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


# ------------------------------------------------------------------ one evaluation


SOURCES = ["Ein Mann mit einem orangefarbenen Hut.", "Ein Boston Terrier läuft.",
           "Ein Mädchen im Karateanzug.", "Fünf Leute in Winterjacken."]


@pytest.fixture
def fixed_hypotheses(monkeypatch):
    """The model's translations replaced by HYPOTHESES (an untrained model's outputs would
    score 0 everywhere): the calls to translate are kept to be checked."""
    module = importlib.import_module("transformer_book.inference.evaluation")
    calls = []

    def translate(trained, sentences, strategy, **settings):
        calls.append((list(sentences), strategy, settings))
        return list(HYPOTHESES[: len(sentences)])

    monkeypatch.setattr(module, "translate", translate)
    return calls


def test_evaluate_scores_are_sacrebleus_own(run_dir, fixed_hypotheses):
    trained = load_trained(run_dir)
    result = evaluate(trained, SOURCES, REFERENCES, beam_size=2, alpha=0.8, resamples=200,
                      seed=7)
    assert isinstance(result, Evaluation) and isinstance(result.scores, CorpusScores)
    assert result.hypotheses == HYPOTHESES and result.references == REFERENCES
    assert result.sources == SOURCES and result.split is None and result.limit is None
    bleu = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES])
    chrf = sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES], word_order=2)
    ter = sacrebleu.corpus_ter(HYPOTHESES, [REFERENCES])
    assert result.scores.bleu == bleu.score and result.scores.chrf == chrf.score
    assert result.scores.ter == ter.score
    for metric, score, signature in ((BLEU(), bleu, result.scores.bleu_signature),
                                     (CHRF(word_order=2), chrf, result.scores.chrf_signature),
                                     (TER(), ter, result.scores.ter_signature)):
        assert metric.corpus_score(HYPOTHESES, [REFERENCES]).score == score.score
        assert signature == str(metric.get_signature())
    assert result.bleu_interval == bootstrap_interval(HYPOTHESES, REFERENCES, "bleu", 200, 7)
    assert result.chrf_interval == bootstrap_interval(HYPOTHESES, REFERENCES, "chrf", 200, 7)
    assert (result.resamples, result.seed) == (200, 7)
    low, high = result.bleu_interval
    assert low <= result.scores.bleu <= high
    dec = trained.run_config.decode
    assert result.decoding == Decoding(
        strategy="beam", settings={"beam_size": 2, "alpha": 0.8, "stop": "exact"},
        max_len_a=dec.max_len_a, max_len_b=dec.max_len_b, cache="growing")
    assert result.decoding.to_dict() == {"strategy": "beam", "beam_size": 2, "alpha": 0.8,
                                         "stop": "exact", "max_len_a": dec.max_len_a,
                                         "max_len_b": dec.max_len_b, "cache": "growing"}
    (sentences, strategy, _), = fixed_hypotheses
    assert sentences == SOURCES and strategy == Beam(2, 0.8, "exact")
    assert "BLEU 95% bootstrap" in str(result) and "\n" not in str(result)


def test_evaluate_defaults_to_the_run_config_and_greedy_is_named(run_dir, fixed_hypotheses):
    trained = load_trained(run_dir)
    dec = trained.run_config.decode
    result = evaluate(trained, SOURCES, REFERENCES, limit=3, resamples=None)
    assert result.decoding.strategy == dec.strategy == "beam"
    assert result.decoding.settings == {"beam_size": dec.beam_size, "alpha": dec.alpha,
                                        "stop": "exact"}
    assert len(result.hypotheses) == len(result.references) == 3 and result.limit == 3
    assert (result.bleu_interval, result.chrf_interval, result.resamples, result.seed) == (
        None, None, None, None)
    assert (BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED) == (1000, 12345)
    greedy = evaluate(trained, SOURCES, REFERENCES, strategy="greedy", other_metrics=False)
    assert greedy.decoding.strategy == "greedy" and greedy.decoding.settings == {}
    assert greedy.scores.chrf is None and greedy.chrf_interval is None
    assert greedy.bleu_interval is not None and greedy.resamples == BOOTSTRAP_RESAMPLES


def test_evaluate_really_decodes_with_translate(run_dir):
    """Without the stand-in: the hypotheses are translate's, and scored as they are."""
    trained = load_trained(run_dir)
    result = evaluate(trained, SOURCES[:2], REFERENCES[:2], beam_size=1, resamples=None)
    assert result.hypotheses == translate(trained, SOURCES[:2], beam_size=1)
    assert result.scores == score_corpus(result.hypotheses, REFERENCES[:2])


def test_evaluate_reads_a_split_in_the_run_languages(run_dir, multi30k_dir, fixed_hypotheses):
    trained = load_trained(run_dir)
    trained.run_config.data.data_dir = str(multi30k_dir)
    result = evaluate(trained, split="val", limit=4, resamples=None)
    pairs = load_multi30k("val", "de", "en", multi30k_dir)[:4]
    assert result.sources == [s for s, _ in pairs]
    assert result.references == [t for _, t in pairs]
    assert result.split == "val" and result.limit == 4
    record = evaluation_record(result, trained, ["transformer-book", "evaluate"])
    assert (record["split"], record["limit"], record["num_hypotheses"]) == ("val", 4, 4)
    assert record["bleu"] == result.scores.bleu and record["bleu_95"] is None
    assert record["command"] == "transformer-book evaluate"
    assert record["examples"][0] == {"source": pairs[0][0], "reference": pairs[0][1],
                                     "hypothesis": HYPOTHESES[0]}


@pytest.mark.parametrize(("call", "match"), [
    (lambda t: evaluate(t), r"sources: expected sources and references \(or a split\), "
                            r"received no sources"),
    (lambda t: evaluate(t, SOURCES), r"received no references"),
    (lambda t: evaluate(t, SOURCES, REFERENCES[:3]),
     r"references: expected 4 sentences \(one per source\), received 3"),
    (lambda t: evaluate(t, SOURCES, REFERENCES, split="val"),
     r"split: expected either a split or sources and references, not both"),
    (lambda t: evaluate(t, split="test"), r"split: expected one of \["),
    (lambda t: evaluate(t, SOURCES, REFERENCES, limit=0), r"limit: expected"),
    (lambda t: evaluate(t, SOURCES, REFERENCES, resamples=50),
     r"resamples: expected an integer >= 100, received 50"),
    (lambda t: evaluate(t, SOURCES, REFERENCES, other_metrics=1),
     r"other_metrics: expected True or False"),
    (lambda t: evaluate(t, "Ein Satz.", ["A sentence."]),
     r"sources: expected a list of strings, received str"),
    (lambda t: evaluate(t, SOURCES, REFERENCES, progress="yes"),
     r"progress: expected True or False, received 'yes'"),
])
def test_evaluate_refuses_bad_input_before_decoding(run_dir, fixed_hypotheses, call, match):
    with pytest.raises(BookError, match=match):
        call(load_trained(run_dir))
    assert fixed_hypotheses == [], "nothing decoded"


def test_training_validation_bleu_is_evaluate_with_its_strategy(run_dir):
    """train.validate.validation_bleu: the same hypotheses and BLEU as evaluate with the
    strategy [train] bleu_strategy names (greedy by default; beam on request)."""
    trained = load_trained(run_dir)
    tokenizer = trained.tokenizer
    data = PreparedData(tokenizer=tokenizer, tokenizer_path=run_dir / "tokenizer.json",
                        train_src=[], train_tgt=[],
                        val_src=tokenizer.encode_batch(SOURCES),
                        val_tgt=tokenizer.encode_batch(REFERENCES),
                        val_references=REFERENCES, stats={})
    greedy = validation_bleu(trained.model, data, 3, run_config=trained.run_config, max_tokens=512)
    expected = evaluate(trained, SOURCES[:3], REFERENCES[:3], beam_size=1,
                        other_metrics=False, resamples=None)
    assert greedy.sources == SOURCES[:3], "the val sources come back exactly from their ids"
    assert greedy.hypotheses == expected.hypotheses and greedy.scores == expected.scores
    assert greedy.decoding.strategy == "greedy" and greedy.scores.chrf is None
    config = RunConfig.from_dict({**trained.run_config.to_dict(),
                                  "train": {**trained.run_config.to_dict()["train"],
                                            "bleu_strategy": "beam"}})
    beam = validation_bleu(trained.model, data, 3, run_config=config, max_tokens=512)
    assert beam.decoding.strategy == "beam" and beam.decoding.settings["beam_size"] == \
        config.decode.beam_size
    assert beam.hypotheses == evaluate(trained, SOURCES[:3], REFERENCES[:3], strategy="beam",
                                       other_metrics=False, resamples=None).hypotheses


# ------------------------------------------------------------------ progress


def test_progress_is_a_bar_of_the_sentences_and_changes_no_result(run_dir, capsys):
    """progress=True: a tqdm bar on stderr counting the sentences of every batch, with its
    rate; the translations, scores and intervals are those decoded without it, which
    prints nothing at all (the default, as notebooks and tests need)."""
    trained = load_trained(run_dir)
    settings = {"beam_size": 2, "max_tokens": 16, "resamples": 100}
    lengths = [len(ids) for ids in trained.tokenizer.encode_batch(SOURCES)]
    assert len(_batches(lengths, 16)) > 1, "several batches: the bar adds up their sentences"
    quiet = evaluate(trained, SOURCES, REFERENCES, **settings)
    assert capsys.readouterr() == ("", ""), "no bar by default"
    shown = evaluate(trained, SOURCES, REFERENCES, progress=True, **settings)
    out, err = capsys.readouterr()
    assert out == "", "the bar goes to stderr"
    assert "translating: 100%" in err and f"{len(SOURCES)}/{len(SOURCES)}" in err, err
    assert "sentence/s" in err or "s/sentence" in err, err
    assert shown.hypotheses == quiet.hypotheses
    assert shown.scores == quiet.scores
    assert (shown.bleu_interval, shown.chrf_interval) == (quiet.bleu_interval,
                                                          quiet.chrf_interval)
    assert evaluate(trained, SOURCES, REFERENCES, progress=False, **settings).hypotheses == (
        quiet.hypotheses)
    assert capsys.readouterr().err == ""


def test_a_refused_translation_shows_no_bar(run_dir, capsys):
    """The arguments are checked before the bar starts: a refusal comes alone."""
    trained = load_trained(run_dir)
    with pytest.raises(BookError, match=r"progress: expected True or False, received 1"):
        translate(trained, SOURCES, beam_size=1, progress=1)
    vocab = trained.model_config.vocab_size
    with pytest.raises(BookError, match=rf"beam_size: expected an integer >= 1 and <= {vocab}"):
        translate(trained, SOURCES, beam_size=vocab + 1, progress=True)
    with pytest.raises(BookError, match=r"sentences\[1\]: expected a non-empty sentence"):
        translate(trained, ["Ein Hund.", " "], progress=True)
    assert capsys.readouterr() == ("", "")


def test_no_progress_does_not_import_tqdm_auto(run_dir, monkeypatch):
    """Without a bar, tqdm.auto is not imported: in a notebook without ipywidgets its import
    prints a warning into the cell that translates."""
    for name in ("tqdm.auto", "tqdm.autonotebook"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    trained = load_trained(run_dir)
    evaluate(trained, SOURCES[:2], REFERENCES[:2], beam_size=1, resamples=None)
    assert "tqdm.auto" not in sys.modules and "tqdm.autonotebook" not in sys.modules
    evaluate(trained, SOURCES[:2], REFERENCES[:2], beam_size=1, resamples=None, progress=True)
    assert "tqdm.auto" in sys.modules
