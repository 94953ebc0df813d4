"""Checkpoints: round trips, tied weights, atomic replacement, hashes, RNG, averaging."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from transformer_book.inference.averaging import average_checkpoints
from transformer_book.run.checkpoint import (
    checkpoint_name,
    list_checkpoints,
    load_checkpoint,
    load_weights,
    prune_checkpoints,
    save_checkpoint,
)
from transformer_book.train.objective import make_optimizer
from transformer_book.util.rng import capture_rng_state, restore_rng_state
from transformer_book.util.validation import BookError


class Tied(nn.Module):
    """Embedding + hidden layer + output projection sharing the embedding matrix (3.4)."""

    def __init__(self, vocab=7, width=4, hidden=5):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.body = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, width))
        self.norm = nn.BatchNorm1d(width)  # an integer buffer: num_batches_tracked
        self.out = nn.Linear(width, vocab, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, ids):
        return self.out(self.body(self.embed(ids)))


def _model(seed=0, **kwargs):
    torch.manual_seed(seed)
    return Tied(**kwargs)


def _same(a: nn.Module, b: nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=0, atol=0)


def test_round_trip_with_tied_weights(tmp_path):
    model = _model(0)
    path = save_checkpoint(tmp_path / checkpoint_name(7), model, config={"d_model": 4}, step=7,
                           tokenizer_json='{"model": "bpe"}', extra={"loss": 1.5})
    assert path.name == "step_00000007"
    meta = json.loads((path / "checkpoint.json").read_text())
    assert meta["tied"] == {"out.weight": "embed.weight"}
    assert "out.weight" not in load_file(path / "model.safetensors")
    assert set(meta["sha256"]) == {"model.safetensors", "rng.json", "tokenizer.json"}
    fresh = _model(1)
    loaded = load_checkpoint(path, fresh)
    _same(model, fresh)
    assert fresh.out.weight is fresh.embed.weight, "loading keeps the tie"
    assert loaded["step"] == 7 and loaded["config"] == {"d_model": 4}
    assert loaded["extra"] == {"loss": 1.5} and loaded["tokenizer"] == "tokenizer.json"
    assert (path / "tokenizer.json").read_text() == '{"model": "bpe"}'
    assert loaded["environment"]["torch"] == torch.__version__


def test_partially_overlapping_views_are_copied(tmp_path):
    class Views(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("whole", torch.arange(6.0))
            self.register_buffer("front", self.whole[:3])
            self.register_buffer("transposed", torch.arange(6.0).reshape(2, 3).t())

    model = Views()
    save_checkpoint(tmp_path / "c", model, config={}, step=0)
    fresh = Views()
    for buffer in fresh.buffers():
        buffer.zero_()
    load_checkpoint(tmp_path / "c", fresh)
    _same(model, fresh)


def test_tokenizer_file_is_copied(tmp_path):
    tok = tmp_path / "bpe.json"
    tok.write_text("{}")
    save_checkpoint(tmp_path / "c", _model(), config={}, step=1, tokenizer_path=tok)
    assert (tmp_path / "c" / "tokenizer.json").read_text() == "{}"


def test_resume_optimizer_scheduler_and_rng_exactly(tmp_path):
    def run(model, optimizer, scheduler, steps):
        losses = []
        for _ in range(steps):
            ids = torch.randint(0, 7, (3,))
            noise = random.random() + float(np.random.rand())  # noqa: NPY002
            loss = nn.functional.dropout(model(ids), 0.5).pow(2).mean() * (1 + noise)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()
            losses.append(loss.item())
        return losses

    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)  # noqa: NPY002
    model = _model(0)
    optimizer, scheduler = make_optimizer(model, 4, 3)
    run(model, optimizer, scheduler, 4)
    save_checkpoint(tmp_path / "c", model, config={}, step=4, optimizer=optimizer,
                    scheduler=scheduler)
    expected = run(model, optimizer, scheduler, 4)

    resumed = _model(5)
    optimizer2, scheduler2 = make_optimizer(resumed, 4, 3)
    torch.manual_seed(123)
    random.seed(123)
    meta = load_checkpoint(tmp_path / "c", resumed, optimizer2, scheduler2, restore_rng=True)
    assert scheduler2.last_epoch == 4
    assert meta["step"] == 4
    assert run(resumed, optimizer2, scheduler2, 4) == expected
    _same(model, resumed)
    # The optimizer file holds plain tensors and numbers only.
    torch.load(tmp_path / "c" / "optimizer.pt", weights_only=True)


def test_rng_state_round_trip_is_json():
    state = json.loads(json.dumps(capture_rng_state()))
    a = (torch.rand(3), random.random(), np.random.rand(2))  # noqa: NPY002
    restore_rng_state(state)
    b = (torch.rand(3), random.random(), np.random.rand(2))  # noqa: NPY002
    assert torch.equal(a[0], b[0]) and a[1] == b[1] and np.array_equal(a[2], b[2])
    with pytest.raises(BookError, match=r"state: expected a dict from capture_rng_state"):
        restore_rng_state({"torch": ""})


def test_interrupted_save_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    target = tmp_path / "latest"
    good = _model(0)
    save_checkpoint(target, good, config={"v": 1}, step=1)

    class PowerCut(torch.optim.SGD):
        def state_dict(self):  # called half-way through the save
            raise KeyboardInterrupt("power cut")

    newer = _model(1)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(target, newer, config={"v": 2}, step=2,
                        optimizer=PowerCut(newer.parameters(), lr=0.1))
    assert [p.name for p in tmp_path.iterdir()] == ["latest"], "no temporary folders left"
    restored = _model(3)
    assert load_checkpoint(target, restored)["step"] == 1
    _same(good, restored)


def test_crash_between_renames_is_recovered(tmp_path, monkeypatch):
    target = tmp_path / "latest"
    good = _model(0)
    save_checkpoint(target, good, config={}, step=1)
    real_replace = os.replace

    def replace(src, dst):
        if os.fspath(dst) == os.fspath(target):  # the old copy moved away, the new one not in
            raise OSError("crash")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="crash"):
        save_checkpoint(target, _model(1), config={}, step=2)
    monkeypatch.undo()
    assert not target.exists()
    restored = _model(2)
    assert load_checkpoint(target, restored)["step"] == 1
    _same(good, restored)


def test_replacing_a_checkpoint(tmp_path):
    target = tmp_path / "latest"
    save_checkpoint(target, _model(0), config={}, step=1)
    newer = _model(1)
    save_checkpoint(target, newer, config={}, step=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest"]
    restored = _model(2)
    assert load_checkpoint(target, restored)["step"] == 2
    _same(newer, restored)


def test_corruption_is_detected(tmp_path):
    path = save_checkpoint(tmp_path / "c", _model(), config={}, step=1)
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(BookError, match=r"model.safetensors: expected sha256 .*corrupted"):
        load_checkpoint(path, _model())
    path = save_checkpoint(tmp_path / "c", _model(), config={}, step=1)
    (path / "rng.json").unlink()
    with pytest.raises(BookError, match=r"rng.json: expected a file listed in checkpoint.json"):
        load_checkpoint(path)


def test_mismatched_model_names_tensors(tmp_path):
    path = save_checkpoint(tmp_path / "c", _model(vocab=7), config={}, step=1)
    with pytest.raises(BookError, match=r"embed.weight: \(7, 4\) vs \(9, 4\)"):
        load_checkpoint(path, _model(vocab=9))
    other = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(BookError, match=r"model: expected tensors matching the checkpoint .*"
                                         r"missing \['0.bias', '0.weight'\], unexpected \["):
        load_checkpoint(path, other)


def test_bad_arguments(tmp_path):
    with pytest.raises(BookError, match=r"model: expected a torch.nn.Module, received dict"):
        save_checkpoint(tmp_path / "c", {}, config={}, step=1)
    with pytest.raises(BookError, match=r"step: expected an integer >= 0, received -1"):
        save_checkpoint(tmp_path / "c", _model(), config={}, step=-1)
    with pytest.raises(BookError, match=r"config: expected JSON-serialisable values"):
        save_checkpoint(tmp_path / "c", _model(), config={"x": object()}, step=1)
    with pytest.raises(BookError, match=r"tokenizer_path: expected an existing file"):
        save_checkpoint(tmp_path / "c", _model(), config={}, step=1, tokenizer_path="nope")
    with pytest.raises(BookError, match=r"directory: expected a checkpoint folder"):
        load_checkpoint(tmp_path / "missing")
    save_checkpoint(tmp_path / "c", _model(), config={}, step=1)
    optimizer, _ = make_optimizer(_model(), 4, 2)
    with pytest.raises(BookError, match=r"optimizer: expected a checkpoint saved with "):
        load_checkpoint(tmp_path / "c", optimizer=optimizer)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())


def test_list_and_prune(tmp_path):
    for step in (30, 5, 100, 12):
        save_checkpoint(tmp_path / checkpoint_name(step), _model(step), config={}, step=step)
    save_checkpoint(tmp_path / "averaged", _model(), config={}, step=1)
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "step_00000005", "step_00000012", "step_00000030", "step_00000100"]
    removed = prune_checkpoints(tmp_path, keep_last=2)
    assert [p.name for p in removed] == ["step_00000005", "step_00000012"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "averaged", "step_00000030", "step_00000100"]
    assert list_checkpoints(tmp_path / "nothing") == []
    with pytest.raises(BookError, match=r"keep_last: expected an integer >= 1, received 0"):
        prune_checkpoints(tmp_path, 0)


def test_average_checkpoints(tmp_path):
    models = [_model(seed) for seed in range(3)]
    for i, m in enumerate(models):
        m.norm.num_batches_tracked += i
        save_checkpoint(tmp_path / checkpoint_name(i), m, config={}, step=i)
    averaged = average_checkpoints(list_checkpoints(tmp_path))
    for name, value in averaged.items():
        stacked = torch.stack([m.state_dict()[name] for m in models])
        if value.is_floating_point():
            torch.testing.assert_close(value, stacked.double().mean(0).float())
        else:
            assert value == 2, "integer buffers come from the last checkpoint"
    assert "out.weight" in averaged
    target = _model(9)
    target.load_state_dict(averaged)


def test_average_rejects_different_shapes(tmp_path):
    save_checkpoint(tmp_path / "a", _model(vocab=7), config={}, step=1)
    save_checkpoint(tmp_path / "b", _model(vocab=8), config={}, step=2)
    with pytest.raises(BookError, match=r"directories: expected checkpoints shaped like "
                                         r".*a, received .*b: shape mismatches \(this vs "
                                         r"first\) \[embed.weight: \(8, 4\) vs \(7, 4\)"):
        average_checkpoints([tmp_path / "a", tmp_path / "b"])
    with pytest.raises(BookError, match=r"directories: expected a non-empty list"):
        average_checkpoints([])


def test_load_weights_verifies_and_restores_tied_names(tmp_path):
    model = _model(0)
    path = save_checkpoint(tmp_path / "c", model, config={}, step=1)
    state = load_weights(path)
    assert state.keys() == model.state_dict().keys()
    torch.testing.assert_close(state["out.weight"], model.embed.weight.detach(), rtol=0, atol=0)
    (path / "rng.json").write_text("{}")
    with pytest.raises(BookError, match=r"rng.json: expected sha256"):
        load_weights(path)


def test_checkpoint_files_are_readable_as_the_umask_allows(tmp_path):
    previous = os.umask(0o022)
    try:
        path = save_checkpoint(tmp_path / "c", _model(), config={}, step=1,
                               tokenizer_json="{}", optimizer=torch.optim.SGD(
                                   _model().parameters(), lr=0.1))
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o755, "the folder, not mkdtemp's 0700"
    modes = {p.name: p.stat().st_mode & 0o777 for p in path.iterdir()}
    assert modes == dict.fromkeys(["checkpoint.json", "checkpoint.sha256", "model.safetensors",
                                   "optimizer.pt", "rng.json", "tokenizer.json"], 0o644)
