"""Scoring translations: corpus BLEU, chrF++ and TER with sacreBLEU, each with its signature.

Section 6.1 reports BLEU on newstest2014 (Table 2). A BLEU number means little without the
tokenisation and casing behind it, so every score here carries sacreBLEU's signature
(Post, 2018). Two BLEU variants are computed on the same detokenised, cased text:

- the standard one (``13a`` tokenisation, case-sensitive) -- what sacreBLEU reports;
- lowercased with ``intl`` tokenisation -- how most published Multi30k figures are made.

Beside BLEU, two metrics that weigh errors differently, each with its signature:

- chrF++ (Popović, 2015 and 2017): an F-score (recall weighted twice, β = 2) of character
  6-grams plus word uni- and bigrams, ``CHRF(word_order=2)``; it gives partial credit for a
  word with the right stem and the wrong ending, which BLEU scores as a plain miss;
- TER (Snover et al., 2006): the edits (insertions, deletions, substitutions, shifts of
  word sequences) per reference word that turn the hypothesis into the reference, in
  percent; *lower* is better.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sacrebleu.metrics import BLEU, CHRF, TER

from transformer_book.util.validation import require, require_bool

__all__ = ["CorpusScores", "check_texts", "score_corpus"]


@dataclass(frozen=True)
class CorpusScores:
    """A corpus's BLEU (two variants), chrF++ and TER, and how each was computed.

    Fields:
        bleu: sacreBLEU's default BLEU (cased, ``13a``), 0-100.
        bleu_signature: e.g. ``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0``.
        bleu_lowercase_intl: BLEU on lowercased text with ``intl`` tokenisation.
        bleu_lowercase_intl_signature: its signature (``case:lc|...|tok:intl``).
        precisions: the 1- to 4-gram precisions of the default BLEU, in percent.
        brevity_penalty: BP of the default BLEU.
        hyp_len / ref_len: total hypothesis and reference lengths in tokens.
        num_sentences: number of segments scored.
        chrf: chrF++ (``CHRF(word_order=2)``), 0-100; ``None`` if not computed.
        chrf_signature: its signature (``...|nc:6|nw:2|...``); ``None`` if not computed.
        ter: TER, 0 and up (lower is better); ``None`` if not computed.
        ter_signature: its signature (``...|tok:tercom|...``); ``None`` if not computed.
    """

    bleu: float
    bleu_signature: str
    bleu_lowercase_intl: float
    bleu_lowercase_intl_signature: str
    precisions: tuple[float, ...]
    brevity_penalty: float
    hyp_len: int
    ref_len: int
    num_sentences: int
    chrf: float | None = None
    chrf_signature: str | None = None
    ter: float | None = None
    ter_signature: str | None = None

    def __str__(self) -> str:
        others = ""
        if self.chrf is not None:
            others += f"chrF++ {self.chrf:.2f} [{self.chrf_signature}] | "
        if self.ter is not None:
            others += f"TER {self.ter:.2f} [{self.ter_signature}] | "
        return (f"BLEU {self.bleu:.2f} [{self.bleu_signature}] | "
                f"lowercase intl {self.bleu_lowercase_intl:.2f} "
                f"[{self.bleu_lowercase_intl_signature}] | {others}{self.num_sentences} sentences, "
                f"BP {self.brevity_penalty:.3f}, hyp/ref {self.hyp_len}/{self.ref_len}")


def check_texts(texts: Sequence[str], argument: str) -> list[str]:
    """``texts`` as a list: a non-empty sequence of strings (not one string), or a
    ``BookError`` naming ``argument``."""
    require(isinstance(texts, Sequence) and not isinstance(texts, (str, bytes)), argument,
            "a list of strings", type(texts).__name__)
    require(len(texts) > 0, argument, "at least one sentence", "an empty list")
    bad = [i for i, text in enumerate(texts) if not isinstance(text, str)]
    require(not bad, argument, "only strings", f"non-strings at positions {bad[:5]}")
    return list(texts)


def score_corpus(hypotheses: Sequence[str], references: Sequence[str], *,
                 other_metrics: bool = True) -> CorpusScores:
    """Corpus BLEU of detokenised hypotheses against one reference each, with chrF++ and TER.

    Args:
        hypotheses: N detokenised, cased model outputs (decode BPE first).
        references: N reference translations, aligned with ``hypotheses``.
        other_metrics: also compute chrF++ and TER (default); ``False`` leaves them
            ``None`` (the greedy BLEU checks during training need BLEU alone).

    Returns:
        A :class:`CorpusScores` with the default and the lowercase-``intl`` BLEU, chrF++ and
        TER, each with its signature.
    """
    hypotheses = check_texts(hypotheses, "hypotheses")
    references = check_texts(references, "references")
    require_bool(other_metrics, "other_metrics")
    require(len(hypotheses) == len(references), "references",
            f"{len(hypotheses)} sentences (one per hypothesis)", f"{len(references)}")
    default = BLEU()
    result = default.corpus_score(hypotheses, [references])
    lowercase = BLEU(lowercase=True, tokenize="intl")
    lowercase_result = lowercase.corpus_score(hypotheses, [references])
    others: dict[str, Any] = {}
    if other_metrics:
        chrf, ter = CHRF(word_order=2), TER()
        others = {"chrf": float(chrf.corpus_score(hypotheses, [references]).score),
                  "chrf_signature": str(chrf.get_signature()),
                  "ter": float(ter.corpus_score(hypotheses, [references]).score),
                  "ter_signature": str(ter.get_signature())}
    return CorpusScores(
        bleu=float(result.score),
        bleu_signature=str(default.get_signature()),
        bleu_lowercase_intl=float(lowercase_result.score),
        bleu_lowercase_intl_signature=str(lowercase.get_signature()),
        precisions=tuple(float(p) for p in result.precisions),
        brevity_penalty=float(result.bp),
        hyp_len=int(result.sys_len),
        ref_len=int(result.ref_len),
        num_sentences=len(hypotheses),
        **others,
    )
