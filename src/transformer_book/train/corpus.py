"""The training corpus: ``[data] dataset``'s pairs -> joint BPE -> encoded, length-filtered
id lists.

Section 5.1: "Sentences were encoded using byte-pair encoding, which has a shared
source-target vocabulary". The training loop (:mod:`transformer_book.train.loop`) encodes
the corpus once with :func:`prepare_data` (which also checks every id once, so that no step
has to), re-segments it every epoch with :func:`resegment_train` under BPE-dropout, groups
each epoch's token-budget batches into optimizer steps with :func:`epoch_steps` and cuts
them into teacher-forcing batches with :func:`make_batch` and :func:`make_step_batch`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from transformer_book.data.batching import TokenBudgetSampler, collate_pairs
from transformer_book.data.corpora import check_dataset, load_corpus
from transformer_book.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, BPETokenizer
from transformer_book.run.checkpoint import METADATA, list_checkpoints
from transformer_book.run.config import RunConfig, with_data_defaults
from transformer_book.util.files import atomic_write_text
from transformer_book.util.validation import require

__all__ = ["PreparedData", "StepBatch", "check_ids", "check_same_data", "epoch_steps",
           "make_batch", "make_step_batch", "prepare_data", "resegment_train"]

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_INFO = "tokenizer-info.json"


@dataclass
class PreparedData:
    """The encoded corpus: BPE ids of the kept train/val pairs and the val texts.

    ``train_pairs`` are the kept training pairs as text, for :func:`resegment_train`;
    ``train_src``/``train_tgt`` hold the plain segmentation until it re-segments them."""

    tokenizer: BPETokenizer
    tokenizer_path: Path
    train_src: list[list[int]]
    train_tgt: list[list[int]]
    val_src: list[list[int]]
    val_tgt: list[list[int]]
    val_references: list[str]
    stats: dict[str, Any]
    train_pairs: list[tuple[str, str]] = field(default_factory=list)


#: Characters per token of ``[data] max_len`` beyond which a side of a pair is dropped
#: before the BPE is trained: BPE training is quadratic in the length of one space-free
#: line (30 KB took 10 s, 100 KB 49 s, 3 MB over 10 minutes), and such a line would not fit
#: ``max_len`` tokens anyway (Multi30k's longest line has 255 characters; the course's
#: shortest limit, 16 tokens, allows 512).
CHARS_PER_TOKEN = 32


def _short(pairs: list[tuple[str, str]], max_len: int) -> list[tuple[str, str]]:
    """The pairs neither side of which is over ``CHARS_PER_TOKEN * max_len`` characters."""
    most = CHARS_PER_TOKEN * max_len
    return [pair for pair in pairs if len(pair[0]) <= most and len(pair[1]) <= most]


def _filter(src: list[list[int]], tgt: list[list[int]], limit: int) -> list[int]:
    """Indices of pairs with 1..limit source tokens and 1..limit-1 target tokens.

    The decoder reads ``<bos> y`` and predicts ``y <eos>``: len(y) + 1 positions.
    """
    return [i for i, (s, t) in enumerate(zip(src, tgt, strict=True))
            if 1 <= len(s) <= limit and 1 <= len(t) <= limit - 1]


def prepare_data(run_config: RunConfig, out_dir: str | Path, *, is_main: bool = True,
                 barrier: Callable[[], None] | None = None,
                 val_sentences: int | None = None) -> PreparedData:
    """Load ``[data] dataset`` (:func:`~transformer_book.data.corpora.load_corpus`), train
    (or reuse) the joint BPE, encode train and valid once.

    Section 5.1: "Sentences were encoded using byte-pair encoding, which has a shared
    source-target vocabulary". The tokenizer is trained on the (subset of the) training
    pairs and cached as ``out_dir/tokenizer.json``, reused while ``[data]`` is unchanged
    (and, for a dataset without fixed checksums, while the training text is).
    Pairs longer than ``[data] max_len`` (or the model's positions) are dropped, those over
    ``CHARS_PER_TOKEN`` characters per token of it before the BPE is trained. With
    ``val_sentences`` only the first that many validation pairs are used.
    """
    require(isinstance(run_config, RunConfig), "run_config", "a RunConfig",
            type(run_config).__name__)
    run_config.validate()  # its fields may have changed since it was built
    d = run_config.data
    out_dir = Path(out_dir)
    checkpoints = list_checkpoints(out_dir)
    if checkpoints:  # a resume: refuse a changed [data] before anything is read or written
        check_same_data(run_config, checkpoints[-1])
    train_pairs = load_corpus(d.dataset, "train", d.src, d.tgt, d.data_dir)
    if d.train_subset is not None:
        train_pairs = train_pairs[: d.train_subset]
    val_pairs = load_corpus(d.dataset, "valid", d.src, d.tgt, d.data_dir)[:val_sentences]
    info: dict[str, Any] = {"dataset": d.dataset, "src": d.src, "tgt": d.tgt,
                            "vocab_size": d.vocab_size, "train_subset": d.train_subset,
                            "train_pairs": len(train_pairs)}
    if not check_dataset(d.dataset, d.src, d.tgt, d.data_dir).checksummed:
        info["train_sha256"] = _fingerprint(train_pairs)  # its files may change in place
    path = _train_or_reuse_tokenizer(out_dir, info, _short(train_pairs, d.max_len),
                                     bool(checkpoints), is_main)
    if barrier is not None:
        barrier()
    tokenizer = BPETokenizer.load(path)
    limit = min(d.max_len, run_config.model_config(tokenizer.vocab_size).max_len)
    encoded = {}
    for split, every in (("train", train_pairs), ("val", val_pairs)):
        pairs = _short(every, d.max_len)  # the rest cannot fit max_len tokens
        src = tokenizer.encode_batch([s for s, _ in pairs])
        tgt = tokenizer.encode_batch([t for _, t in pairs])
        keep = _filter(src, tgt, limit)
        encoded[split] = ([src[i] for i in keep], [tgt[i] for i in keep],
                          [pairs[i][1] for i in keep], [pairs[i] for i in keep])
    require(len(encoded["train"][0]) > 0, "[data]", "training pairs within max_len",
            f"none of {len(train_pairs)} pairs is at most {limit} BPE tokens long")
    for split, (src, tgt, _, _) in encoded.items():
        check_ids(src, tokenizer.vocab_size, f"{split} sources")
        check_ids(tgt, tokenizer.vocab_size, f"{split} targets")
    stats = {"train_pairs": len(train_pairs), "train_kept": len(encoded["train"][0]),
             "val_pairs": len(val_pairs), "val_kept": len(encoded["val"][0]),
             "vocab_size": tokenizer.vocab_size, "max_len": limit,
             "train_src_tokens": sum(map(len, encoded["train"][0])),
             "train_tgt_tokens": sum(map(len, encoded["train"][1]))}
    return PreparedData(tokenizer=tokenizer, tokenizer_path=path,
                        train_src=encoded["train"][0], train_tgt=encoded["train"][1],
                        val_src=encoded["val"][0], val_tgt=encoded["val"][1],
                        val_references=encoded["val"][2], stats=stats,
                        train_pairs=encoded["train"][3])


def _fingerprint(pairs: list[tuple[str, str]]) -> str:
    """SHA-256 of the pairs' text, each pair a JSON line ``["source", "target"]``."""
    digest = hashlib.sha256()
    for pair in pairs:
        digest.update(json.dumps(pair, ensure_ascii=False).encode() + b"\n")
    return digest.hexdigest()


def _train_or_reuse_tokenizer(out_dir: Path, info: dict, train_pairs: list,
                              has_checkpoints: bool, is_main: bool) -> Path:
    """The path of ``out_dir``'s tokenizer, trained on ``train_pairs`` unless ``info``
    matches the one it was trained with. Under checkpoints it is never replaced. An info
    file written before ``dataset`` was a setting describes Multi30k."""
    path, info_path = out_dir / TOKENIZER_FILE, out_dir / TOKENIZER_INFO
    saved_info = _read_json(info_path)
    then = {"dataset": "multi30k", **saved_info} if isinstance(saved_info, dict) else None
    cached = path.is_file() and then == info
    require(cached or not (has_checkpoints and path.is_file()), str(path),
            f"a tokenizer trained with {info} ({TOKENIZER_INFO}), as the checkpoints in "
            f"{out_dir} would be", f"{saved_info} (use another out folder)")
    if is_main and not cached:
        out_dir.mkdir(parents=True, exist_ok=True)
        texts = [s for s, _ in train_pairs] + [t for _, t in train_pairs]
        BPETokenizer.train(texts, info["vocab_size"]).save(path)
        atomic_write_text(info_path, json.dumps(info, indent=2) + "\n")
    return path


def resegment_train(data: PreparedData, p: float) -> None:
    """Re-encode the kept training pairs with BPE-dropout (Provilkov et al., 2020).

    Each merge is skipped with probability ``p`` (:meth:`BPETokenizer.with_dropout`), so
    every call gives ``data.train_src``/``train_tgt`` a fresh segmentation of the same
    text, with the same vocabulary. The set of pairs does not change: a pair whose new
    segmentation is longer than the corpus's limit (``stats["max_len"]``) keeps its plain
    one. The ids need no new check (the vocabulary is the checked one). Draws are not
    seeded (``tokenizers``' own generator): two runs, or a run and its resumption, see
    different segmentations.
    """
    require(len(data.train_pairs) == len(data.train_src), "data",
            "a PreparedData from prepare_data (with its training texts)",
            f"{len(data.train_pairs)} texts for {len(data.train_src)} pairs")
    dropped = data.tokenizer.with_dropout(p)
    src = dropped.encode_batch([s for s, _ in data.train_pairs])
    tgt = dropped.encode_batch([t for _, t in data.train_pairs])
    limit = data.stats["max_len"]
    for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
        if len(s) > limit or len(t) > limit - 1:  # as _filter's limits
            src[i], tgt[i] = data.train_src[i], data.train_tgt[i]
    data.train_src, data.train_tgt = src, tgt


def _read_json(path: Path) -> Any:
    """The JSON content of ``path``, or ``None`` if it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def check_same_data(run_config: RunConfig, checkpoint: Path) -> None:
    """Refuse to resume from ``checkpoint`` with another ``[data]`` (``data_dir`` aside: it
    says where the files are, not what they hold). Reads only ``checkpoint.json``; one that
    cannot be read is left to the checkpoint loader to refuse."""
    saved = _read_json(checkpoint / METADATA)
    for key in ("config", "run", "data"):
        saved = saved.get(key) if isinstance(saved, dict) else None
    if not isinstance(saved, dict):
        return
    now = run_config.to_dict()["data"]
    before = with_data_defaults(saved)
    changed = [f"[data] {key}: {before.get(key)!r} in the checkpoint, {now.get(key)!r} now"
               for key in sorted(set(before) | set(now))
               if key != "data_dir" and before.get(key) != now.get(key)]
    require(not changed, "resume", f"the config of the checkpoint {checkpoint}",
            "; ".join(changed) + " (use another --out folder, or --no-resume after "
            "removing the checkpoints)")


def make_batch(src: list[list[int]], tgt: list[list[int]], indices: list[int],
               device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Teacher forcing for the pairs ``indices``: ``src (B, S)``, decoder input
    ``<bos> y (B, T)`` and target ``y <eos> (B, T)``, right-padded, on ``device``."""
    src_ids, tgt_ids = collate_pairs([(src[i], tgt[i]) for i in indices], PAD_ID,
                                     bos_id=BOS_ID, eos_id=EOS_ID)  # (B, S), (B, T + 1)
    tgt_ids = tgt_ids.to(device, non_blocking=True)
    return src_ids.to(device, non_blocking=True), tgt_ids[:, :-1], tgt_ids[:, 1:]


def check_ids(sequences: list[list[int]], vocab_size: int, argument: str) -> None:
    """Every id of ``sequences`` lies in ``[0, vocab_size)`` and none is the padding id.

    The corpus is checked once, here on the host, when it is prepared: the training step
    and the validation loss then read no values back from the device to check them.
    """
    low = min((min(s) for s in sequences if s), default=0)
    high = max((max(s) for s in sequences if s), default=0)
    require(low >= 0 and high < vocab_size, argument, f"ids in [0, {vocab_size})",
            f"ids from {low} to {high}")
    require(not any(PAD_ID in s for s in sequences), argument,
            f"no padding id ({PAD_ID}) inside a sentence", "one")


@dataclass(frozen=True)
class StepBatch:
    """One optimizer step's data on this process: ``micro`` holds one
    ``(src (B, S), tgt_in (B, T), tgt_out (B, T))`` per micro-batch (gradient
    accumulation), and the real (non-padding) token counts of all of them, counted from the
    id lists: ``target_tokens`` (y + <eos>) and ``source_tokens``."""

    micro: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    target_tokens: int
    source_tokens: int


def make_step_batch(src: list[list[int]], tgt: list[list[int]], chunk: list[list[int]],
                    device: torch.device) -> StepBatch:
    """The :class:`StepBatch` of ``chunk``, a list of micro-batches of pair indices."""
    micro = [make_batch(src, tgt, indices, device) for indices in chunk]
    # Counted on the host from the id lists: no device synchronisation.
    target_tokens = sum(len(tgt[i]) + 1 for indices in chunk for i in indices)
    source_tokens = sum(len(src[i]) for indices in chunk for i in indices)
    return StepBatch(micro, target_tokens, source_tokens)


def epoch_steps(sampler: TokenBudgetSampler, epoch: int, accumulation: int = 1
                ) -> list[list[list[int]]]:
    """This process's batches of ``epoch`` (Section 5.1's token budgets), grouped
    ``accumulation`` at a time: one list of micro-batches per optimizer step."""
    sampler.set_epoch(epoch)
    batches = list(sampler)
    return [batches[i:i + accumulation] for i in range(0, len(batches), accumulation)]
