"""From a trained model to scored translations (Sections 6.1-6.2): greedy and beam search
and sampling, step rules of one decoding loop (:func:`generate`); the output-length limit,
translating text, checkpoint averaging, sacreBLEU (BLEU, chrF++, TER), the paired bootstrap
that compares two systems, and :func:`evaluate`, which does it all for a loaded model.
"""

from transformer_book.inference.averaging import (
    average_checkpoints,
)
from transformer_book.inference.beam import (
    STOPPING_RULES,
    Beam,
    beam_search,
    check_alpha,
    check_beam_size,
    length_penalty,
    score_hypothesis,
)
from transformer_book.inference.decoding import (
    Sampling,
    decoding_strategy,
)
from transformer_book.inference.evaluation import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    Decoding,
    Evaluation,
    evaluate,
    evaluation_record,
    write_evaluation,
)
from transformer_book.inference.generate import (
    CACHES,
    Limits,
    StepRule,
    generate,
)
from transformer_book.inference.greedy import (
    Greedy,
    greedy_decode,
)
from transformer_book.inference.lengths import (
    output_length_limits,
)
from transformer_book.inference.scoring import (
    CorpusScores,
    check_texts,
    score_corpus,
)
from transformer_book.inference.significance import (
    SIGNIFICANCE_LEVEL,
    SIGNIFICANCE_METRICS,
    Comparison,
    bootstrap_interval,
    compare_systems,
)
from transformer_book.inference.stepper import (
    Stepper,
    check_decoding,
    evaluation_mode,
)
from transformer_book.inference.trained import (
    TrainedModel,
    load_trained,
    resolve_checkpoint,
)
from transformer_book.inference.translate import (
    MAX_SENTENCES_PER_BATCH,
    encode_sources,
    translate,
    translate_ids,
)

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "CACHES",
    "MAX_SENTENCES_PER_BATCH",
    "SIGNIFICANCE_LEVEL",
    "SIGNIFICANCE_METRICS",
    "STOPPING_RULES",
    "Beam",
    "Comparison",
    "CorpusScores",
    "Decoding",
    "Evaluation",
    "Greedy",
    "Limits",
    "Sampling",
    "StepRule",
    "Stepper",
    "TrainedModel",
    "average_checkpoints",
    "beam_search",
    "bootstrap_interval",
    "check_alpha",
    "check_beam_size",
    "check_decoding",
    "check_texts",
    "compare_systems",
    "decoding_strategy",
    "encode_sources",
    "evaluate",
    "evaluation_mode",
    "evaluation_record",
    "generate",
    "greedy_decode",
    "length_penalty",
    "load_trained",
    "output_length_limits",
    "resolve_checkpoint",
    "score_corpus",
    "score_hypothesis",
    "translate",
    "translate_ids",
    "write_evaluation",
]
