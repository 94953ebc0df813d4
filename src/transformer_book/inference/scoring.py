"""Scoring translations: corpus BLEU with sacreBLEU, reported with its signature.

Section 6.1 reports BLEU on newstest2014 (Table 2). A BLEU number means little without the
tokenisation and casing behind it, so every score here carries sacreBLEU's signature
(Post, 2018). Two variants are computed on the same detokenised, cased text:

- the standard one (``13a`` tokenisation, case-sensitive) -- what sacreBLEU reports;
- lowercased with ``intl`` tokenisation -- how most published Multi30k figures are made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU

from transformer_book.util.validation import require

__all__ = ["BleuResult", "corpus_bleu"]


@dataclass(frozen=True)
class BleuResult:
    """A corpus BLEU score and how it was computed.

    Fields:
        score: sacreBLEU's default BLEU (cased, ``13a``), 0-100.
        signature: e.g. ``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0``.
        lowercase_intl_score: BLEU on lowercased text with ``intl`` tokenisation.
        lowercase_intl_signature: its signature (``case:lc|...|tok:intl``).
        precisions: the 1- to 4-gram precisions of the default score, in percent.
        brevity_penalty: BP of the default score.
        hyp_len / ref_len: total hypothesis and reference lengths in tokens.
        num_sentences: number of segments scored.
    """

    score: float
    signature: str
    lowercase_intl_score: float
    lowercase_intl_signature: str
    precisions: tuple[float, ...]
    brevity_penalty: float
    hyp_len: int
    ref_len: int
    num_sentences: int

    def __str__(self) -> str:
        return (f"BLEU {self.score:.2f} [{self.signature}] | "
                f"lowercase intl {self.lowercase_intl_score:.2f} "
                f"[{self.lowercase_intl_signature}] | {self.num_sentences} sentences, "
                f"BP {self.brevity_penalty:.3f}, hyp/ref {self.hyp_len}/{self.ref_len}")


def _check_texts(texts: Sequence[str], argument: str) -> list[str]:
    require(isinstance(texts, Sequence) and not isinstance(texts, (str, bytes)), argument,
            "a list of strings", type(texts).__name__)
    require(len(texts) > 0, argument, "at least one sentence", "an empty list")
    bad = [i for i, text in enumerate(texts) if not isinstance(text, str)]
    require(not bad, argument, "only strings", f"non-strings at positions {bad[:5]}")
    return list(texts)


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> BleuResult:
    """Corpus BLEU of detokenised hypotheses against one reference each.

    Args:
        hypotheses: N detokenised, cased model outputs (decode BPE first).
        references: N reference translations, aligned with ``hypotheses``.

    Returns:
        A :class:`BleuResult` with the default and the lowercase-``intl`` scores and their
        signatures.
    """
    hypotheses = _check_texts(hypotheses, "hypotheses")
    references = _check_texts(references, "references")
    require(len(hypotheses) == len(references), "references",
            f"{len(hypotheses)} sentences (one per hypothesis)", f"{len(references)}")
    default = BLEU()
    result = default.corpus_score(hypotheses, [references])
    lowercase = BLEU(lowercase=True, tokenize="intl")
    lowercase_result = lowercase.corpus_score(hypotheses, [references])
    return BleuResult(
        score=float(result.score),
        signature=str(default.get_signature()),
        lowercase_intl_score=float(lowercase_result.score),
        lowercase_intl_signature=str(lowercase.get_signature()),
        precisions=tuple(float(p) for p in result.precisions),
        brevity_penalty=float(result.bp),
        hyp_len=int(result.sys_len),
        ref_len=int(result.ref_len),
        num_sentences=len(hypotheses),
    )
