"""Data-parallel training with torchrun (gloo, 2 CPU processes) equals one process.

``torchrun --nproc_per_node=2 -m transformer_book.cli train ...`` -- the documented way to
train on several devices (book/multi_gpu.md) -- splits each epoch's shuffled batch list
between the ranks: rank r takes batches r, r + 2, ... So step i of a 2-process run consumes
batches 2i and 2i + 1, exactly what one process with ``accumulation = 2`` consumes, and
the loss is normalised by the target tokens of both. With dropout 0 the two runs therefore
compute the same losses, step for step (up to the order of floating-point sums).

When the number of batches in an epoch is odd, the ranks must still take the same number of
steps: the sampler's policy (``drop_last=False``) pads the list by repeating the epoch's
first batch, so the last step of a 2-process epoch sees one batch more than the
single-process step it corresponds to. The second test pins that policy down.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from transformer_book.data.batching import TokenBudgetSampler
from transformer_book.run.config import load_run_config
from transformer_book.train.corpus import TOKENIZER_FILE, TOKENIZER_INFO, prepare_data
from transformer_book.train.loop import train

pytestmark = pytest.mark.slow  # spawns two training processes

REPO = Path(__file__).resolve().parents[1]
MAX_TOKENS = 128  # per process and per side
SUBSET = 64  # training pairs: 9 batches of <= 128 tokens, an odd number (checked below)


def _toml(multi30k_dir: Path, accumulation: int, max_steps: int) -> str:
    return f"""
[model]
preset = "tiny"
max_len = 64
dropout = 0.0            # the ranks draw different dropout masks; without dropout they agree

[data]
vocab_size = 500
max_tokens = {MAX_TOKENS}
train_subset = {SUBSET}
max_len = 32
data_dir = "{multi30k_dir}"

[train]
max_steps = {max_steps}
max_minutes = 5.0
warmup_steps = 10
accumulation = {accumulation}
eval_every = 1000
checkpoint_every = 1000
seed = 0
precision = "fp32"
"""


@pytest.fixture(scope="module")
def runs(multi30k_dir, tmp_path_factory):
    """One epoch trained twice: 2 processes x 1 batch per step, and 1 process x 2 batches."""
    root = tmp_path_factory.mktemp("ddp")
    (root / "ddp.toml").write_text(_toml(multi30k_dir, 1, 1))
    config = load_run_config(root / "ddp.toml")
    data = prepare_data(config, root / "prep", val_sentences=8)  # trains the BPE once
    sampler = TokenBudgetSampler([len(s) for s in data.train_src], MAX_TOKENS,
                                 [len(t) + 1 for t in data.train_tgt], shuffle=True, seed=0)
    batches = sampler.batches()  # epoch 0, before sharding
    steps = (len(batches) + 1) // 2
    for name in ("ddp", "single"):  # both runs reuse that tokenizer
        (root / name).mkdir()
        for file in (TOKENIZER_FILE, TOKENIZER_INFO):
            shutil.copy(root / "prep" / file, root / name / file)
    (root / "ddp.toml").write_text(_toml(multi30k_dir, 1, steps))
    (root / "single.toml").write_text(_toml(multi30k_dir, 2, steps))

    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", "-m", "transformer_book.cli", "train",
               "--config", str(root / "ddp.toml"), "--out", str(root / "ddp"),
               "--results", str(root / "results"), "--bleu-sentences", "0",
               "--val-sentences", "8", "--quiet"]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    (record_path,) = (root / "results").glob("train-ddp-*.json")
    ddp = json.loads(record_path.read_text())

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = train(load_run_config(root / "single.toml"), root / "single", progress=False,
                       results_dir=root / "results", name="single", bleu_sentences=0,
                       val_sentences=8)
    finally:
        torch.set_num_threads(threads)
    return {"ddp": ddp, "single": single, "batches": batches, "data": data,
            "stdout": done.stdout}


def _tokens(data, batch: list[int]) -> int:
    """Source + target tokens of one batch, as the loop counts them (target + <eos>)."""
    return sum(len(data.train_src[i]) + len(data.train_tgt[i]) + 1 for i in batch)


def single_global(result) -> int:
    """The global batch (tokens per side) recorded by an in-process run."""
    record = json.loads(Path(result.record_path).read_text())
    return record["global_batch_tokens_per_side"]


def test_two_processes_match_one_process_with_accumulation(runs):
    ddp, single, batches = runs["ddp"], runs["single"], runs["batches"]
    assert ddp["world_size"] == 2 and ddp["hardware"]["world_size"] == 2
    assert ddp["global_batch_tokens_per_side"] == single_global(single) == 2 * MAX_TOKENS
    full_pairs = len(batches) // 2  # steps made of two real batches on both sides
    ddp_losses = torch.tensor([e["loss"] for e in ddp["loss_curve"]], dtype=torch.float64)
    one_losses = torch.tensor([e["loss"] for e in single.losses], dtype=torch.float64)
    assert len(ddp_losses) == len(one_losses) == (len(batches) + 1) // 2
    assert torch.allclose(ddp_losses[:full_pairs], one_losses[:full_pairs], rtol=1e-5, atol=1e-5), \
        (ddp_losses, one_losses)
    for i in range(full_pairs):  # the same two batches each step: the same tokens
        expected = _tokens(runs["data"], batches[2 * i]) + _tokens(runs["data"], batches[2 * i + 1])
        assert ddp["loss_curve"][i]["tokens"] == single.losses[i]["tokens"] == expected
    assert "2 process(es)" in runs["stdout"], "rank 0 reports the process count"
    assert runs["stdout"].count("record:") == 1, "only rank 0 writes the record"


def test_odd_batch_count_repeats_the_first_batch(runs):
    """Policy: 9 batches on 2 ranks -> 5 steps; rank 1's last batch is batch 0 again."""
    batches, data = runs["batches"], runs["data"]
    assert len(batches) % 2 == 1, "the fixture must produce an odd batch count"
    last = len(batches) // 2
    ddp_step = runs["ddp"]["loss_curve"][last]
    single_step = runs["single"].losses[last]
    assert single_step["tokens"] == _tokens(data, batches[-1]), "one process: the last batch alone"
    assert ddp_step["tokens"] == _tokens(data, batches[-1]) + _tokens(data, batches[0]), \
        "two processes: the last batch and, on rank 1, the epoch's first batch again"
    ends = [e["step"] for e in runs["ddp"]["evals"]]
    assert ends == [e["step"] for e in runs["single"].evals] == [last + 1], \
        "both runs end the epoch after the same number of steps"
