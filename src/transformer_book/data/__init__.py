"""Data for the course: corpora, BPE tokenization, batching and synthetic toy tasks.

Section 5.1 "Training Data and Batching" of the paper, scaled down to a laptop:

- :mod:`~transformer_book.data.corpora` -- datasets by name and :func:`load_corpus`, the one
  way training reads sentence pairs: Multi30k or a folder of parallel text;
- :mod:`~transformer_book.data.multi30k` -- the course's sentence pairs (verified, cached);
- :mod:`~transformer_book.data.tokenizer` -- byte-pair encoding with a shared
  source-target vocabulary; :mod:`~transformer_book.data.vocabulary` -- the word-level
  baseline it replaces;
- :mod:`~transformer_book.data.batching` -- padding, masks, token-budget length buckets;
- :mod:`~transformer_book.data.toy` -- copy/reverse/sort and story-QA tasks.
"""

from transformer_book.data.batching import (
    TokenBudgetSampler,
    collate_pairs,
    pad_sequences,
    padding_fraction,
    token_mask,
)
from transformer_book.data.corpora import (
    CORPUS_SPLITS,
    DATASETS,
    Dataset,
    load_corpus,
)
from transformer_book.data.multi30k import (
    MULTI30K_LANGUAGES,
    MULTI30K_SHA256,
    MULTI30K_SPLITS,
    DatasetUnavailableError,
    load_multi30k,
    multi30k_path,
)
from transformer_book.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    BPETokenizer,
)
from transformer_book.data.toy import (
    TOY_TASKS,
    StoryQA,
    StoryTensors,
    encode_stories,
    encode_story,
    make_story_qa,
    make_toy_task,
    story_vocabulary,
    toy_batches,
)
from transformer_book.data.vocabulary import WordVocabulary, split_words, unknown_rate

__all__ = [
    "BOS_ID",
    "CORPUS_SPLITS",
    "DATASETS",
    "EOS_ID",
    "MULTI30K_LANGUAGES",
    "MULTI30K_SHA256",
    "MULTI30K_SPLITS",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "TOY_TASKS",
    "UNK_ID",
    "BPETokenizer",
    "Dataset",
    "DatasetUnavailableError",
    "StoryQA",
    "StoryTensors",
    "TokenBudgetSampler",
    "WordVocabulary",
    "collate_pairs",
    "encode_stories",
    "encode_story",
    "load_corpus",
    "load_multi30k",
    "make_story_qa",
    "make_toy_task",
    "multi30k_path",
    "pad_sequences",
    "padding_fraction",
    "split_words",
    "story_vocabulary",
    "token_mask",
    "toy_batches",
    "unknown_rate",
]
