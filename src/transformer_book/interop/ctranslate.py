"""An exported folder (:mod:`~transformer_book.interop.hf_export`) converted for CTranslate2,
and translated with it.

CTranslate2 is a C++ inference engine for Transformers: it runs the same arithmetic as the
model, but fuses operations, keeps its own caches, reorders and pads batches and can quantize
the weights to int8. Its Transformers converter (``ct2-transformers-converter``,
``ctranslate2.converters.TransformersConverter``) reads a ``MarianMTModel`` folder; its
stock Marian loader, though, assumes OPUS-MT's conventions, which are not the paper's and
not this course's: ``<pad>`` is the *last* vocabulary entry (the loader drops the last row
of every vocabulary matrix) and the decoder starts from a zero vector instead of a start
token's embedding. Applied to a course export, it would decode a different model.
:func:`convert` therefore converts with the loader Marian's own code implies: the same spec
(post-LN, no LayerNorm on the embeddings, √d_model scale, the position table, the tied
projection), every vocabulary row kept, the decoder started from ``<bos>``'s embedding
(``decoder_start_token_id``), exactly as ``MarianMTModel.generate`` does.

:func:`translate_ids` decodes BPE ids with a ``ctranslate2.Translator``: beam size,
CTranslate2's length penalty (scores divided by ``length^α``, not Wu et al.'s
``((5 + |Y|) / 6)^α``), at most ``max_len - 1`` tokens, ``<eos>`` allowed from the first
step (the course's greedy search allows it too); with ``beam_size=1`` it is greedy search.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import ctranslate2
from ctranslate2.converters import transformers as ct2_transformers
from transformers import AutoTokenizer

from transformer_book.interop.hf_export import quiet_transformers
from transformer_book.util.validation import require, require_one_of, require_positive_int

__all__ = ["COMPUTE_TYPES", "convert", "load_translator", "translate_ids"]

#: The weight types compared in the benchmark: float32, and int8 weights with int8 GEMMs.
COMPUTE_TYPES = ("float32", "int8")


class _CourseMarianLoader(ct2_transformers.BartLoader):
    """Marian's layer layout (BART's loader, post-LN, no embedding LayerNorm), with the
    whole vocabulary and ``decoder_start_token_id``'s embedding as the first decoder input
    (the stock ``MarianMTLoader`` removes the last vocabulary row and starts from zeros)."""

    @property
    def architecture_name(self) -> str:
        return "MarianMTModel"

    def get_model_spec(self, model):  # CTranslate2's interface
        model.config.normalize_before = False
        model.config.normalize_embedding = False
        return super().get_model_spec(model)


@contextlib.contextmanager
def _course_loader() -> Iterator[None]:
    """Convert ``MarianConfig`` folders with :class:`_CourseMarianLoader` inside the block
    (CTranslate2 picks a loader by the config's class name), the stock loader after it."""
    loaders = ct2_transformers._MODEL_LOADERS  # its registry of loaders
    stock = loaders.get("MarianConfig")
    loaders["MarianConfig"] = _CourseMarianLoader()
    try:
        yield
    finally:
        if stock is None:
            loaders.pop("MarianConfig", None)
        else:
            loaders["MarianConfig"] = stock


def convert(exported: str | Path, out: str | Path, force: bool = False) -> Path:
    """Convert an exported folder into a CTranslate2 model folder ``out`` (float32 weights;
    int8 is chosen when loading, :func:`load_translator`). Returns ``out``. ``force``
    lets CTranslate2 replace an existing ``out`` (it deletes the folder first), so ``out``
    must be apart from ``exported``: neither it, nor inside it, nor holding it."""
    exported = Path(exported)
    require((exported / "config.json").is_file(), "exported",
            "a folder written by transformer-book export (with config.json)", str(exported))
    here, there = Path(out).resolve(), exported.resolve()
    require(here != there and there not in here.parents and here not in there.parents, "out",
            "a folder apart from the exported one (neither it, inside it, nor holding it)",
            str(out))
    with _course_loader(), quiet_transformers():
        converter = ct2_transformers.TransformersConverter(str(exported))
        return Path(converter.convert(str(out), force=force))


def load_translator(folder: str | Path, compute_type: str = "float32",
                    threads: int = 1) -> ctranslate2.Translator:
    """A CPU ``Translator`` of a converted folder: ``compute_type`` one of
    :data:`COMPUTE_TYPES` (int8 quantizes the weights as it loads), ``threads`` intra-op
    threads, one translation at a time (``inter_threads=1``)."""
    require_one_of(compute_type, "compute_type", COMPUTE_TYPES)
    require_positive_int(threads, "threads")
    return ctranslate2.Translator(str(folder), device="cpu", compute_type=compute_type,
                                  intra_threads=threads, inter_threads=1)


def translate_ids(translator: ctranslate2.Translator, tokenizer: AutoTokenizer,
                  sources: Sequence[Sequence[int]], *, beam_size: int = 1,
                  alpha: float = 0.0, max_len: int = 128) -> list[list[int]]:
    """Decode ``sources`` (BPE id lists) in one call: the ids of each best hypothesis,
    without ``<eos>``. ``alpha`` is CTranslate2's ``length_penalty`` (score / length^α);
    ``max_len`` the model's positions (the start token takes one)."""
    require_positive_int(beam_size, "beam_size")
    tokens = [tokenizer.convert_ids_to_tokens(list(ids)) for ids in sources]
    results = translator.translate_batch(
        tokens, beam_size=beam_size, length_penalty=alpha, max_decoding_length=max_len - 1,
        min_decoding_length=0, max_input_length=0, max_batch_size=0)
    return [tokenizer.convert_tokens_to_ids(r.hypotheses[0]) for r in results]
