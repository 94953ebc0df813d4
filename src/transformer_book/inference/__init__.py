"""From a trained model to scored translations (Sections 6.1-6.2): greedy and beam search,
the output-length limit, translating text, checkpoint averaging and sacreBLEU.
"""

from transformer_book.inference.averaging import average_checkpoints
from transformer_book.inference.decode import (
    STOPPING_RULES,
    beam_search,
    greedy_decode,
    length_penalty,
    score_hypothesis,
)
from transformer_book.inference.scoring import BleuResult, corpus_bleu
from transformer_book.inference.trained import TrainedModel, load_trained, resolve_checkpoint
from transformer_book.inference.translate import encode_sources, translate, translate_ids

__all__ = [
    "STOPPING_RULES",
    "BleuResult",
    "TrainedModel",
    "average_checkpoints",
    "beam_search",
    "corpus_bleu",
    "encode_sources",
    "greedy_decode",
    "length_penalty",
    "load_trained",
    "resolve_checkpoint",
    "score_hypothesis",
    "translate",
    "translate_ids",
]
