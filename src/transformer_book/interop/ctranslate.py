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

:class:`TranslatorProcess` runs one translator in a process of its own. In one process,
PyTorch and CTranslate2 slow each other: both keep a team of threads alive (more threads, on
the course machine, than it has cores), and PyTorch's operations stay slower once
CTranslate2 has run beside it (``benchmarks/bench_engines.py``'s last row measures it). A
benchmark that times both gives each its own process.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from collections.abc import Iterator, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from types import TracebackType
from typing import Any

import ctranslate2
from ctranslate2.converters import transformers as ct2_transformers
from transformers import AutoTokenizer

from transformer_book.interop.hf_export import quiet_transformers
from transformer_book.util.validation import require, require_one_of, require_positive_int

__all__ = ["COMPUTE_TYPES", "TranslatorProcess", "convert", "load_translator",
           "translate_ids"]

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


class TranslatorProcess:
    """A converted folder's translator (:func:`load_translator`) in a process of its own,
    started with ``spawn``: :meth:`translate_ids` is :func:`translate_ids` run there, with
    the exported folder ``tokenizer``'s tokenizer, and ``seconds`` holds the ``"wall"`` and
    ``"cpu"`` seconds it took there (the CPU clock of this process does not count that
    one's work). A context manager; the process ends with the block (or :meth:`close`). An
    error there is raised here."""

    def __init__(self, converted: str | Path, tokenizer: str | Path,
                 compute_type: str = "float32", threads: int = 1) -> None:
        require_one_of(compute_type, "compute_type", COMPUTE_TYPES)
        require_positive_int(threads, "threads")
        context = multiprocessing.get_context("spawn")
        self._conn, theirs = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(theirs, str(converted), str(tokenizer), compute_type, threads),
            daemon=True)
        self._process.start()
        theirs.close()
        self.seconds = {"wall": 0.0, "cpu": 0.0}
        try:
            self._answer()  # loaded, or the error that stopped it
        except BaseException:
            self.close()
            raise

    def translate_ids(self, sources: Sequence[Sequence[int]], *, beam_size: int = 1,
                      alpha: float = 0.0, max_len: int = 128) -> list[list[int]]:
        """:func:`translate_ids`, in the process."""
        self._conn.send(([list(ids) for ids in sources],
                         {"beam_size": beam_size, "alpha": alpha, "max_len": max_len}))
        ids, self.seconds = self._answer()
        return ids

    def _answer(self) -> Any:
        try:
            kind, value = self._conn.recv()
        except EOFError:  # the process ended without answering (killed, or crashed)
            self._process.join()
            raise RuntimeError("the CTranslate2 process ended with exit code "
                               f"{self._process.exitcode} before answering") from None
        if kind == "error":
            raise value
        return value

    def close(self) -> None:
        """End the process (it finishes the translation it is running first)."""
        if self._process.is_alive():
            with contextlib.suppress(OSError):  # it may be ending just now, after an error
                self._conn.send(None)
        self._process.join()
        self._conn.close()

    def __enter__(self) -> TranslatorProcess:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


def _serve(conn: Connection, converted: str, tokenizer: str, compute_type: str,
           threads: int) -> None:
    """:class:`TranslatorProcess`'s side: load, answer ``("ok", ...)`` or ``("error", e)``
    to each request until ``None``."""
    try:
        with quiet_transformers():
            hf_tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        translator = load_translator(converted, compute_type, threads)
        conn.send(("ok", None))
    except Exception as error:  # reported to the caller, which raises it
        conn.send(("error", error))
        return
    while (request := conn.recv()) is not None:
        sources, settings = request
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            ids = translate_ids(translator, hf_tokenizer, sources, **settings)
            conn.send(("ok", (ids, {"wall": time.perf_counter() - wall,
                                    "cpu": time.process_time() - cpu})))
        except Exception as error:
            conn.send(("error", error))
