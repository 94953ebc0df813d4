"""Corpus BLEU: the same numbers and signatures as sacreBLEU itself."""

from __future__ import annotations

import pytest
from sacrebleu.metrics import BLEU

from transformer_book.inference.scoring import BleuResult, corpus_bleu
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
