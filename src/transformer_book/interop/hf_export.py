"""A trained checkpoint as a Hugging Face ``MarianMTModel`` folder, exact to rounding.

``export_checkpoint(run, out)`` writes a folder that ``AutoModelForSeq2SeqLM.from_pretrained``
and ``AutoTokenizer.from_pretrained`` load with no custom code: ``config.json`` and
``model.safetensors`` (a ``MarianMTModel``), ``generation_config.json`` (greedy), the course's
BPE as a ``PreTrainedTokenizerFast`` (``tokenizer.json``, ``tokenizer_config.json``), a model
card and ``transformer_book_export.json`` (where the weights came from).

Why Marian: it is the paper's model as ``transformers`` ships it -- post-LN layers, embeddings
scaled by √d_model and shared with the pre-softmax projection (Section 3.4), ReLU (Section
3.3), sinusoidal positions counted from 0 (Section 3.5; Marian has no padding offset, unlike
BART), LayerNorm ε = 1e-5 and ``final_logits_bias`` (left at zero: the paper's projection has
no bias). One layout differs: Marian's sinusoid table puts the sines in the first half of
the model dimension and the cosines in the second, where the paper interleaves them
(``PE(pos, 2i) = sin``, ``PE(pos, 2i+1) = cos``). Reordering the model dimension by
``perm = (0, 2, 4, ..., 1, 3, 5, ...)`` in every weight that reads or writes the residual
stream (embedding columns; the inputs of the attention and FFN projections; the outputs of
attention's ``W^O`` and of the FFN's second matrix, with their biases; each LayerNorm's γ and
β) maps the course's model onto Marian's table exactly: a LayerNorm's mean and variance, and
a dot product of two vectors reordered alike, do not depend on the order of the coordinates.

What cannot be exported exactly is refused with a :class:`BookError` that names the option
the model was trained with: pre-LN, learned positions, a final LayerNorm, a generator bias,
untied embeddings, a LayerNorm ε other than Marian's, or positions whose sinusoids Marian
computes to other float32 values than the course's table. Before the folder is put in place,
the export loads it back with ``transformers`` and compares its logits with the course
model's in float64 on a padded batch.

The export is a transaction (:func:`~transformer_book.util.folders.replacing`): written
next to ``out`` under a hidden name and exchanged with ``out`` in one step, so a kill at
any moment leaves the old export or the new one there, and the next export tidies what an
interrupted one left. ``out`` must be new, empty, or an earlier export (recognised by its
``transformer_book_export.json``, which lists the files it wrote) holding only its own
files; any other folder is refused, so an export never deletes files it did not write.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import glob
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from transformers import (
    AutoModelForSeq2SeqLM,
    GenerationConfig,
    MarianConfig,
    MarianMTModel,
    PreTrainedTokenizerFast,
)

from transformer_book.data.tokenizer import SPECIAL_TOKENS
from transformer_book.inference.trained import TrainedModel, load_trained
from transformer_book.interop.export_folder import (
    check_replaceable,
    exported_files,
    file_hashes,
)
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.run.checkpoint import TOKENIZER
from transformer_book.util.files import atomic_write_json, atomic_write_text
from transformer_book.util.folders import replacing, tidy
from transformer_book.util.records import git_commit
from transformer_book.util.validation import require, require_positive_int

__all__ = [
    "MARIAN_LAYER_NORM_EPS",
    "MARKER",
    "ExportResult",
    "check_exportable",
    "check_output_folder",
    "export_checkpoint",
    "export_command",
    "export_model",
    "logit_difference",
    "quiet_transformers",
    "residual_permutation",
    "to_marian",
]

#: ``modeling_marian`` builds every LayerNorm as ``nn.LayerNorm(d_model)``: PyTorch's ε.
MARIAN_LAYER_NORM_EPS = 1e-5
#: The file that marks a folder as an export (an earlier export may be replaced).
MARKER = "transformer_book_export.json"

# (what the option must be, why) for each TransformerConfig option Marian fixes.
_FIXED = {
    "norm_first": (False, "MarianMTModel is post-LN, LayerNorm(x + Sublayer(x))"),
    "positional": ("sinusoidal", "MarianMTModel adds a fixed sinusoid table"),
    "final_norm": (False, "MarianMTModel has no LayerNorm after its last layers"),
    "generator_bias": (False, "the export keeps final_logits_bias at zero, as the paper's "
                              "pre-softmax projection has no bias"),
    "tie_embeddings": (True, "MarianMTModel shares one matrix between both embeddings and "
                             "the output projection"),
    "layer_norm_eps": (MARIAN_LAYER_NORM_EPS, "MarianMTModel's LayerNorms use "
                                              "nn.LayerNorm's default eps"),
}


@dataclass
class ExportResult:
    """What :func:`export_checkpoint` wrote: the ``folder``, the ``steps`` whose weights went
    in, the ``num_parameters`` of the MarianMTModel (the tied matrix counted once, the fixed
    position tables not at all: the course model's count) and the
    largest ``max_abs_difference`` of its float64 logits from the course model's."""

    folder: Path
    steps: list[int]
    num_parameters: int
    max_abs_difference: float
    checkpoints: list[Path] = field(default_factory=list)


def check_exportable(config: TransformerConfig, argument: str = "checkpoint") -> None:
    """Refuse (``BookError``) a model MarianMTModel cannot compute exactly, naming the
    option it was trained with."""
    require(isinstance(config, TransformerConfig), argument, "a TransformerConfig",
            type(config).__name__)
    for option, (needed, why) in _FIXED.items():
        value = getattr(config, option)
        require(value == needed, argument,
                f"a model MarianMTModel computes exactly, with {option}={needed!r} ({why})",
                f"a model trained with {option}={value!r}")


def residual_permutation(d_model: int) -> torch.Tensor:
    """``perm (d_model,)``: coordinate ``m`` of Marian's residual stream is coordinate
    ``perm[m]`` of the course's, ``(0, 2, ..., d - 2, 1, 3, ..., d - 1)``: the sines, then
    the cosines (Section 3.5 interleaves them; ``MarianSinusoidalPositionalEmbedding`` does
    not)."""
    require_positive_int(d_model, "d_model")
    require(d_model % 2 == 0, "d_model", "an even integer (sin/cos pairs)", d_model)
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _marian_config(config: TransformerConfig) -> MarianConfig:
    """The MarianConfig of a course model (dropouts kept for fine-tuning; ``forced_eos``
    off, since the course never forces ``<eos>`` at the length limit)."""
    return MarianConfig(
        vocab_size=config.vocab_size, decoder_vocab_size=config.vocab_size,
        max_position_embeddings=config.max_len, d_model=config.d_model,
        encoder_layers=config.num_encoder_layers, decoder_layers=config.num_decoder_layers,
        encoder_ffn_dim=config.d_ff, decoder_ffn_dim=config.d_ff,
        encoder_attention_heads=config.num_heads, decoder_attention_heads=config.num_heads,
        activation_function="relu", dropout=config.dropout,
        attention_dropout=config.attention_dropout, activation_dropout=0.0,
        scale_embedding=True, share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
        pad_token_id=config.pad_id, bos_token_id=config.bos_id, eos_token_id=config.eos_id,
        decoder_start_token_id=config.bos_id, forced_eos_token_id=None,
        architectures=["MarianMTModel"])


def _layer_pairs(prefix: str, kind: str) -> dict[str, str]:
    """Course sub-module names -> Marian's, for one encoder or decoder layer."""
    pairs = {"self_attn": "self_attn", "norm1": "self_attn_layer_norm",
             "ffn.linear1": "fc1", "ffn.linear2": "fc2"}
    if kind == "encoder":
        pairs["norm2"] = "final_layer_norm"
    else:
        pairs.update({"cross_attn": "encoder_attn", "norm2": "encoder_attn_layer_norm",
                      "norm3": "final_layer_norm"})
    return {f"{prefix}.{ours}": f"model.{prefix}.{theirs}" for ours, theirs in pairs.items()}


def _marian_state(model: Transformer) -> dict[str, torch.Tensor]:
    """The course model's weights under Marian's names, the model dimension reordered by
    :func:`residual_permutation`: ``[:, perm]`` where a matrix reads the residual stream,
    ``[perm]`` where a matrix or bias writes it, and on LayerNorm γ, β."""
    config = model.config
    ours = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
    perm = residual_permutation(config.d_model)
    d = config.d_model
    state = {"model.shared.weight": ours["src_embed.weight"][:, perm]}
    for kind, count in (("encoder", config.num_encoder_layers),
                        ("decoder", config.num_decoder_layers)):
        for i in range(count):
            for mine, theirs in _layer_pairs(f"{kind}.layers.{i}", kind).items():
                if mine.endswith("attn"):
                    w, b = ours[f"{mine}.in_proj.weight"], ours[f"{mine}.in_proj.bias"]
                    for j, name in enumerate(("q_proj", "k_proj", "v_proj")):
                        state[f"{theirs}.{name}.weight"] = w[j * d:(j + 1) * d][:, perm]
                        state[f"{theirs}.{name}.bias"] = b[j * d:(j + 1) * d]
                    state[f"{theirs}.out_proj.weight"] = ours[f"{mine}.out_proj.weight"][perm]
                    state[f"{theirs}.out_proj.bias"] = ours[f"{mine}.out_proj.bias"][perm]
                elif mine.endswith("linear1"):
                    state[f"{theirs}.weight"] = ours[f"{mine}.weight"][:, perm]
                    state[f"{theirs}.bias"] = ours[f"{mine}.bias"]
                else:  # linear2 and the LayerNorms write the residual stream
                    state[f"{theirs}.weight"] = ours[f"{mine}.weight"][perm]
                    state[f"{theirs}.bias"] = ours[f"{mine}.bias"][perm]
    return {name: tensor.contiguous() for name, tensor in state.items()}


def to_marian(model: Transformer, argument: str = "checkpoint") -> MarianMTModel:
    """A ``MarianMTModel`` (eval mode, the course model's dtype) computing what ``model``
    computes: :func:`check_exportable`, then the reordered weights of :func:`_marian_state`.
    Marian computes its own position table when it loads, so the course's table, reordered,
    must equal it in float32 for every one of the ``max_len`` positions (else refused)."""
    require(isinstance(model, Transformer), argument, "a transformer_book Transformer",
            type(model).__name__)
    config = model.config
    check_exportable(config, argument)
    dtype = next(model.parameters()).dtype
    marian = MarianMTModel(_marian_config(config)).to(dtype).eval()
    state = _marian_state(model)
    own = marian.state_dict()
    # computed by Marian (positions), zero (the bias), or tied to model.shared.weight:
    derived = {k for k in own if k.endswith(("embed_positions.weight", "embed_tokens.weight"))}
    derived |= {"final_logits_bias", "lm_head.weight"}
    assert set(own) - derived == set(state), sorted(set(own) ^ set(state) - derived)
    with torch.no_grad():
        for name, tensor in state.items():
            own[name].copy_(tensor)
        marian.final_logits_bias.zero_()
    _check_positions(model, marian, argument)
    return marian


def _check_positions(model: Transformer, marian: MarianMTModel, argument: str) -> None:
    """The course's float32 sinusoids, reordered, are Marian's for every position."""
    config = model.config
    ours = model.src_pos.pe.float().cpu()[:, residual_permutation(config.d_model)]
    theirs = marian.model.encoder.embed_positions.create_weight().float()
    rows = (ours != theirs).any(dim=1).nonzero()
    require(len(rows) == 0, argument,
            "positions whose sinusoids MarianMTModel computes to the same float32 values",
            f"a model trained with max_len={config.max_len}, whose position "
            f"{int(rows[0]) if len(rows) else -1} differs")


def _generation_config(config: TransformerConfig) -> GenerationConfig:
    """Greedy decoding from ``<bos>`` to ``<eos>``, at most ``max_len`` positions (the start
    token included), nothing banned or forced: what the course's greedy search does."""
    return GenerationConfig(
        decoder_start_token_id=config.bos_id, bos_token_id=config.bos_id,
        eos_token_id=config.eos_id, pad_token_id=config.pad_id, forced_eos_token_id=None,
        max_length=config.max_len, num_beams=1, do_sample=False)


def _tokenizer(tokenizer_file: Path, max_len: int) -> PreTrainedTokenizerFast:
    """The course's byte-level BPE, as it is: no special tokens added around a sentence,
    text reading ``"<bos>"`` encoded as text (``split_special_tokens``, as the course's
    ``encode_special_tokens``), and spacing kept (``clean_up_tokenization_spaces=False``)."""
    pad, bos, eos, unk = SPECIAL_TOKENS
    return PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_file), pad_token=pad, bos_token=bos, eos_token=eos,
        unk_token=unk, clean_up_tokenization_spaces=False, split_special_tokens=True,
        model_max_length=max_len, padding_side="right", add_bos_token=False,
        add_eos_token=False)


def _name_tokenizer_class(path: Path) -> None:
    """Name the class ``PreTrainedTokenizerFast``, as ``transformers`` 4 knows it (5 saves
    its new name for the same class, ``TokenizersBackend``, and reads either)."""
    settings = json.loads(path.read_text(encoding="utf-8"))
    atomic_write_json(path, {**settings, "tokenizer_class": "PreTrainedTokenizerFast"})


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """No progress bars from ``transformers`` while saving and loading."""
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()


def logit_difference(model: Transformer, marian: torch.nn.Module, *, seed: int = 0,
                     batch: int = 3, length: int = 9) -> float:
    """``max |logits_course - logits_marian|`` in float64 on a random right-padded batch of
    ``batch`` sources and targets (rows of lengths ``length, length - 2, ...``), every
    position compared (pad rows included: neither model masks target keys)."""
    config = model.config
    ours = copy.deepcopy(model).cpu().double().eval()
    theirs = copy.deepcopy(marian).cpu().double().eval()
    g = torch.Generator().manual_seed(seed)
    length = min(length, config.max_len)
    src = torch.randint(4, config.vocab_size, (batch, length), generator=g)
    tgt = torch.randint(4, config.vocab_size, (batch, length), generator=g)
    tgt[:, 0] = config.bos_id
    for row in range(batch):
        src[row, max(1, length - 2 * row):] = config.pad_id
        tgt[row, max(1, length - 2 * row - 1):] = config.pad_id
    with torch.no_grad():
        expected = ours(src, tgt)
        got = theirs(input_ids=src, attention_mask=src.ne(config.pad_id),
                     decoder_input_ids=tgt).logits
    return float((expected - got).abs().max())


def check_output_folder(out: str | Path, argument: str = "out") -> Path:
    """``out`` may be written: a new or empty folder, or an earlier export (its
    :data:`MARKER`) holding only the files it wrote, in a place this user may write to,
    not the current folder (:func:`~transformer_book.interop.export_folder.check_replaceable`)."""
    return check_replaceable(out, argument, MARKER)


def _card(trained: TrainedModel, steps: list[int]) -> str:
    data = trained.run_config.data
    return (f"# A Transformer trained with *The Transformer, step by step*\n\n"
            f"{data.src} -> {data.tgt} on Multi30k, the steps {steps} "
            f"({'averaged' if len(steps) > 1 else 'one checkpoint'}). Load it with\n\n"
            "```python\nfrom transformers import AutoModelForSeq2SeqLM, AutoTokenizer\n"
            "model = AutoModelForSeq2SeqLM.from_pretrained(FOLDER)\n"
            "tokenizer = AutoTokenizer.from_pretrained(FOLDER)\n```\n\n"
            "The model dimension is reordered (sines first, then cosines) to match "
            "Marian's sinusoid table; the logits are those of the original model.\n")


def export_model(trained: TrainedModel, out: str | Path, argument: str = "out"
                 ) -> ExportResult:
    """Write ``trained`` (from :func:`load_trained`) as a Marian folder at ``out`` (see
    the module docstring): built, saved into a temporary sibling, loaded back and compared
    in float64 (max |Δlogit| <= 1e-9, else an ``AssertionError``: a bug), then renamed."""
    out = Path(out)
    tidy(out.parent, MARKER, glob.escape(out.name))
    out = check_output_folder(out, argument)
    steps = list(trained.selection.get("averaged_steps", [trained.step]))
    marian = to_marian(trained.model)
    with replacing(out, MARKER) as temp, quiet_transformers():
        marian.save_pretrained(temp)
        _generation_config(trained.model_config).save_pretrained(temp)
        _tokenizer(trained.checkpoints[-1] / TOKENIZER,
                   trained.model_config.max_len).save_pretrained(temp)
        _name_tokenizer_class(temp / "tokenizer_config.json")
        loaded = AutoModelForSeq2SeqLM.from_pretrained(temp)
        difference = logit_difference(trained.model, loaded)
        assert difference <= 1e-9, f"exported logits differ by {difference}"
        atomic_write_text(temp / "README.md", _card(trained, steps))
        atomic_write_json(temp / MARKER, {  # last: a folder holding it is complete
            "format": 3, "files": exported_files(temp), "hashes": file_hashes(temp, MARKER),
            "checkpoints": [str(p) for p in trained.checkpoints],
            "steps": steps, "selection": trained.selection,
            "model_config": trained.model_config.to_dict(),
            "residual_permutation": "Marian coordinate m = course coordinate perm[m], "
                                    "perm = (0, 2, ..., d-2, 1, 3, ..., d-1)",
            "max_abs_logit_difference_float64": difference,
            "transformers": transformers.__version__, "git": git_commit()})
        check_output_folder(out, argument)  # again: a file saved there meanwhile is kept
    parameters = sum(p.numel() for name, p in loaded.named_parameters()  # tables left out
                     if not name.endswith("embed_positions.weight"))
    return ExportResult(out, steps, parameters, difference, list(trained.checkpoints))


def export_checkpoint(checkpoint: str | Path, out: str | Path, average: int | None = None
                      ) -> ExportResult:
    """Load ``checkpoint`` (a checkpoint or run folder; with ``average`` the mean of the
    ``average`` checkpoints ending at it, Section 6.1) and :func:`export_model` it."""
    check_output_folder(out)
    if average is not None:
        require_positive_int(average, "average")
    trained = load_trained(checkpoint, average=average)
    check_exportable(trained.model_config, str(checkpoint))
    return export_model(trained, out)


def export_command(args: argparse.Namespace) -> int:
    """``transformer-book export``: the arguments checked before anything is loaded."""
    if args.average is not None:
        require_positive_int(args.average, "--average")
    check_output_folder(args.out, "--out")
    trained = load_trained(args.checkpoint, average=args.average)
    check_exportable(trained.model_config, f"--checkpoint {args.checkpoint}")
    result = export_model(trained, args.out, "--out")
    print(f"exported the weights of steps {result.steps} to {result.folder} "
          f"(MarianMTModel, {result.num_parameters:,} parameters; float64 logits within "
          f"{result.max_abs_difference:.1e} of the course model's)")
    return 0
