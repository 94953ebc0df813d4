"""Checkpoints: round trips, tied weights, atomic replacement, hashes, RNG, averaging."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from transformer_book.inference.averaging import average_checkpoints
from transformer_book.run import checkpoint as saves
from transformer_book.run.checkpoint import (
    checkpoint_name,
    list_checkpoints,
    load_checkpoint,
    load_weights,
    prune_checkpoints,
    save_checkpoint,
)
from transformer_book.train.objective import make_optimizer
from transformer_book.util import folders
from transformer_book.util.files import sha256_file
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
    tokenizer = tmp_path / "bpe.json"
    tokenizer.write_text('{"model": "bpe"}')
    path = save_checkpoint(tmp_path / checkpoint_name(7), model, config={"d_model": 4}, step=7,
                           tokenizer_path=tokenizer, extra={"loss": 1.5})
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
    assert loaded["extra"] == {"loss": 1.5}
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


def test_empty_tensors_are_never_tied(tmp_path):
    """Empty tensors may share an address (no memory at all): each is stored as itself."""
    class Empty(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("a", torch.zeros(0))
            self.register_buffer("b", torch.zeros(0))
            self.register_buffer("c", torch.zeros(0, 3))

    path = save_checkpoint(tmp_path / "c", Empty(), config={}, step=0)
    assert json.loads((path / "checkpoint.json").read_text())["tied"] == {}
    assert {k: tuple(v.shape) for k, v in load_file(path / "model.safetensors").items()} == {
        "a": (0,), "b": (0,), "c": (0, 3)}
    assert load_weights(path)["c"].shape == (0, 3)


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
    meta = load_checkpoint(tmp_path / "c", resumed, optimizer2, scheduler2)
    restore_rng_state(meta["rng_state"])
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
    monkeypatch.setattr(folders, "_exchange", lambda first, second: False)  # none here
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


def test_prune_keeps_the_best_by_val_loss_beside_the_newest(tmp_path):
    """The val optimum of a run that overfits lies far before its end: keep_last alone
    would delete it."""
    for step in (10, 20, 30, 40, 50, 60):
        save_checkpoint(tmp_path / checkpoint_name(step), _model(step), config={}, step=step)
    val_loss = {10: 3.0, 20: 2.1, 30: 2.0, 40: 2.4, 50: 2.6}  # 60: no evaluation at its step
    removed = prune_checkpoints(tmp_path, keep_last=2, keep_best=2, val_loss=val_loss)
    assert [p.name for p in removed] == ["step_00000010", "step_00000040"]
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "step_00000020", "step_00000030", "step_00000050", "step_00000060"]
    assert prune_checkpoints(tmp_path, keep_last=1, keep_best=0, val_loss=val_loss) != []
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000060"]
    with pytest.raises(BookError, match=r"keep_best: expected an integer >= 0, received -1"):
        prune_checkpoints(tmp_path, 1, keep_best=-1)


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
        (tmp_path / "bpe.json").write_text("{}")
        path = save_checkpoint(tmp_path / "c", _model(), config={}, step=1,
                               tokenizer_path=tmp_path / "bpe.json", optimizer=torch.optim.SGD(
                                   _model().parameters(), lr=0.1))
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o755, "the folder, not mkdtemp's 0700"
    modes = {p.name: p.stat().st_mode & 0o777 for p in path.iterdir()}
    assert modes == dict.fromkeys(["checkpoint.json", "checkpoint.sha256", "model.safetensors",
                                   "optimizer.pt", "rng.json", "tokenizer.json"], 0o644)


# ------------------------------------------------- checkpoint.json: checked and protected


def _rewrite(path, change):
    """Edit checkpoint.json as ``change(meta)`` does and record its new hash, as a careful
    editor (or an older writer) would: only the structure checks stand in the way."""
    meta = json.loads((path / "checkpoint.json").read_text())
    changed = change(meta)
    meta = meta if changed is None else changed
    text = json.dumps(meta)
    (path / "checkpoint.json").write_text(text)
    digest = hashlib.sha256(text.encode()).hexdigest()
    (path / "checkpoint.sha256").write_text(f"{digest}  checkpoint.json\n")


def _set(key, value):
    def change(meta):
        meta[key] = value
    return change


def test_an_edited_config_is_refused(tmp_path):
    """norm_first flipped keeps every shape and changes the logits: the hash catches it."""
    path = save_checkpoint(tmp_path / "c", _model(), config={"model": {"norm_first": False}},
                           step=3)
    meta_path = path / "checkpoint.json"
    meta_path.write_text(meta_path.read_text().replace('"norm_first": false',
                                                       '"norm_first": true'))
    with pytest.raises(BookError, match=r"c/checkpoint.json: expected sha256 '[0-9a-f]{64}' "
                       r"as recorded in checkpoint.sha256 \(an edited or corrupted "
                       r"checkpoint.json.*received sha256 [0-9a-f]{64}$"):
        load_checkpoint(path, _model())
    with pytest.raises(BookError, match=r"checkpoint.json: expected sha256"):
        list_checkpoints(tmp_path, "c")
    (path / "checkpoint.sha256").unlink()
    with pytest.raises(BookError, match=r"c/checkpoint.sha256: expected the sha256 of "
                       r"checkpoint.json \(format 2 checkpoints have one\), received no such"):
        load_checkpoint(path)


_SHA256 = (r"checkpoint.json \[sha256\]: expected an object \{file name: 64 lowercase hex "
           r"digits\} listing model.safetensors and only the files of a checkpoint "
           r"\(model.safetensors, tokenizer.json, optimizer.pt, rng.json\), ")
MALFORMED = [
    ("a list", lambda meta: [meta], r"checkpoint.json: expected a JSON object \(checkpoint "
     r"metadata\), received list"),
    ("sha256 a list", _set("sha256", ["model.safetensors"]),
     _SHA256 + r"received \['model.safetensors'\]$"),
    ("sha256 without the weights", _set("sha256", {}), _SHA256 + r"received \{\}$"),
    ("sha256 naming a file outside", lambda meta: meta["sha256"].update(
        {"../../../../etc/hostname": "0" * 64}),
     _SHA256 + r"received .*'../../../../etc/hostname'"),
    ("sha256 not hex", lambda meta: meta["sha256"].update({"rng.json": 5}),
     _SHA256 + r"received .*'rng.json': 5"),
    ("step missing", lambda meta: meta.pop("step") and None,
     r"checkpoint.json \[step\]: expected an integer >= 0, received no such field"),
    ("step a string", _set("step", "ten"),
     r"checkpoint.json \[step\]: expected an integer >= 0, received 'ten'"),
    ("step negative", _set("step", -1), r"\[step\]: expected an integer >= 0, received -1"),
    ("step a bool", _set("step", True), r"\[step\]: expected an integer >= 0, received True"),
    ("tied a list", _set("tied", ["out.weight"]),
     r"checkpoint.json \[tied\]: expected an object \{dropped tensor name: kept tensor name\}"),
    ("tied to itself", _set("tied", {"out.weight": "out.weight"}), r"\[tied\]: expected an "
     r"object \{dropped"),
    ("format 3", _set("format_version", 3), r"\[format_version\]: expected 2, received 3"),
    ("format 1", _set("format_version", 1), r"\[format_version\]: expected 2, received 1"),
    ("config a string", _set("config", "norm_first"),
     r"checkpoint.json \[config\]: expected a JSON object, received 'norm_first'"),
    ("extra a list", _set("extra", []), r"\[extra\]: expected a JSON object, received \[\]"),
]


@pytest.mark.parametrize(("change", "match"), [case[1:] for case in MALFORMED],
                         ids=[case[0] for case in MALFORMED])
def test_malformed_metadata_names_the_file_and_field(tmp_path, change, match):
    path = save_checkpoint(tmp_path / "step_00000003", _model(), config={}, step=3)
    _rewrite(path, change)
    for call in (lambda: load_checkpoint(path, _model()), lambda: load_weights(path),
                 lambda: list_checkpoints(tmp_path)):
        with pytest.raises(BookError, match=match):
            call()


def test_a_tied_entry_must_name_stored_tensors(tmp_path):
    path = save_checkpoint(tmp_path / "c", _model(), config={}, step=3)
    _rewrite(path, _set("tied", {"out.weight": "nonexistent.weight"}))
    with pytest.raises(BookError, match=r"c/checkpoint.json \[tied\]: expected entries naming "
                       r"a tensor of model.safetensors .*\['out.weight -> nonexistent.weight'\]"):
        load_checkpoint(path, _model())
    _rewrite(path, _set("tied", {"embed.weight": "body.0.weight"}))  # would overwrite one
    with pytest.raises(BookError, match=r"\['embed.weight -> body.0.weight'\]"):
        load_weights(path)


def test_files_outside_or_unlisted_are_never_read(tmp_path):
    outside = tmp_path / "secret"
    outside.write_text("not a checkpoint's")
    path = save_checkpoint(tmp_path / "c", _model(), config={}, step=3)
    (path / "rng.json").unlink()
    (path / "rng.json").symlink_to(outside)
    with pytest.raises(BookError, match=r"c/rng.json: expected a plain file inside the "
                       r"checkpoint folder, received a link or a folder$"):
        load_checkpoint(path)
    path = save_checkpoint(tmp_path / "d", _model(), config={}, step=3)
    torch.save({"optimizer": None, "scheduler": None}, path / "optimizer.pt")
    with pytest.raises(BookError, match=r"d/optimizer.pt: expected a file listed in "
                       r"checkpoint.json \(or none\), received a file that is not listed"):
        load_checkpoint(path)


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_a_malicious_optimizer_file_is_a_clear_refusal(tmp_path):
    model = _model()
    path = save_checkpoint(tmp_path / "c", model, config={}, step=3,
                           optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    torch.save({"optimizer": _Payload(), "scheduler": None}, path / "optimizer.pt")
    _rewrite(path, lambda meta: meta["sha256"].update(
        {"optimizer.pt": sha256_file(path / "optimizer.pt")}))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(BookError, match=r"c/optimizer.pt: expected optimizer and schedule "
                       r"states of plain tensors and numbers \(torch.load with "
                       r"weights_only=True\), received UnpicklingError: "):
        load_checkpoint(path, optimizer=optimizer)
    torch.save({"optimizer": {"state": {}, "param_groups": []}, "scheduler": None},
               path / "optimizer.pt")
    _rewrite(path, lambda meta: meta["sha256"].update(
        {"optimizer.pt": sha256_file(path / "optimizer.pt")}))
    with pytest.raises(BookError, match=r"optimizer: expected optimizer state that fits it "
                       r"\(from .*optimizer.pt\), received ValueError"):
        load_checkpoint(path, optimizer=optimizer)


def test_unreadable_rng_and_weights_are_clear_refusals(tmp_path):
    path = save_checkpoint(tmp_path / "c", _model(), config={}, step=3)
    for name, content, match in [
        ("rng.json", b"{not json", r"c/rng.json: expected valid JSON \(RNG states\)"),
        ("rng.json", b"[1, 2]", r"c/rng.json: expected a JSON object \(RNG states\), "
                                r"received list"),
        ("model.safetensors", b"garbage", r"c/model.safetensors: expected a safetensors file"),
    ]:
        (path / name).write_bytes(content)
        _rewrite(path, lambda meta, name=name: meta["sha256"].update(
            {name: sha256_file(path / name)}))
        with pytest.raises(BookError, match=match):
            load_checkpoint(path, _model())


# --------------------------------------------------- leftovers of an interrupted save


def _dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _leftover(parent, target, kind, pid, source=None, host=None):
    """A hidden folder as a save killed in process ``pid`` leaves it: ``source`` (a
    checkpoint folder) renamed to it, as the new copy (tmp) or the one replaced (old)."""
    folder = parent / f".{target}.{kind}-{host or folders._HOST}-{pid}"
    if source is None:
        folder.mkdir()
    else:
        os.replace(source, folder)
    return folder


def _checkpoint(parent, name, step, seed=0):
    """A checkpoint, saved elsewhere when it is to become a leftover of ``parent`` (a save
    in ``parent`` itself would tidy the leftovers made so far)."""
    folder = parent if name.startswith("step_") else parent.parent / f"{parent.name}-sources"
    return save_checkpoint(folder / name, _model(seed), config={}, step=step)


def test_a_half_written_save_is_removed_and_reported(tmp_path, capsys):
    _checkpoint(tmp_path, checkpoint_name(10), 10)
    half = _leftover(tmp_path, checkpoint_name(20), "tmp", _dead_pid())
    (half / "model.safetensors").write_bytes(b"\0" * 100)  # the weights, then the kill
    assert list_checkpoints(tmp_path) == [tmp_path / checkpoint_name(10)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [checkpoint_name(10)]
    assert f"removed {half.name}, left by an interrupted write" in \
        capsys.readouterr().err


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_leftovers_of_running_processes_and_other_machines_stay(tmp_path, capsys, monkeypatch,
                                                                relative):
    """A listing while a save runs (in this process, as another thread would list) leaves
    the save's folder alone, whether the save named its folder by a relative path or not,
    and those of other running processes and other machines."""
    running = _leftover(tmp_path, checkpoint_name(20), "tmp", os.getppid())
    other_host = _leftover(tmp_path, checkpoint_name(30), "tmp", _dead_pid(), host="elsewhere")
    real_write, seen = saves.atomic_write_bytes, []

    def write(path, data):  # a listing half-way through the save of step 40
        seen.append((list_checkpoints(tmp_path), path.parent.is_dir()))
        return real_write(path, data)

    monkeypatch.setattr(saves, "atomic_write_bytes", write)
    monkeypatch.chdir(tmp_path)
    save_checkpoint(checkpoint_name(40) if relative else tmp_path / checkpoint_name(40),
                    _model(), config={}, step=40)
    monkeypatch.undo()
    assert seen and all(found == [] and own for found, own in seen)
    assert list_checkpoints(tmp_path) == [tmp_path / checkpoint_name(40)]
    assert running.is_dir() and other_host.is_dir()
    assert "removed" not in capsys.readouterr().err


def test_a_crash_between_the_renames_recovers_the_newest_complete_copy(tmp_path, capsys):
    """Killed after the old step_20 moved away, before the new one moved in: both copies
    verify, so the new one comes back (deterministically), and the rest goes."""
    _checkpoint(tmp_path, checkpoint_name(10), 10)
    pid = _dead_pid()
    _leftover(tmp_path, checkpoint_name(20), "old", pid, _checkpoint(tmp_path, "a", 20, 1))
    _leftover(tmp_path, checkpoint_name(20), "tmp", pid, _checkpoint(tmp_path, "b", 20, 2))
    assert [p.name for p in list_checkpoints(tmp_path)] == [checkpoint_name(10),
                                                           checkpoint_name(20)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [checkpoint_name(10),
                                                          checkpoint_name(20)]
    _same(_model(2), _load(tmp_path / checkpoint_name(20)))
    err = capsys.readouterr().err
    assert "step_00000020: recovered from .step_00000020.tmp-" in err and "(the new copy;" in err


def _load(path):
    model = _model(9)
    load_checkpoint(path, model)
    return model


class _Digests:
    """``hashlib.sha256`` that records the bytes of every digest it gives."""

    real = hashlib.sha256

    def __init__(self, seen):
        self.seen = seen

    def __call__(self, data=b"", **kwargs):
        seen, digest, parts = self.seen, self.real(data, **kwargs), [bytes(data)]

        class Counted:
            def update(self, more):
                parts.append(bytes(more))
                digest.update(more)

            def hexdigest(self):
                seen.append(b"".join(parts))
                return digest.hexdigest()

        return Counted()


def test_a_recovered_checkpoint_is_hashed_once(tmp_path, monkeypatch):
    """Recovery takes a copy whose checkpoint.json matches checkpoint.sha256 (the last file
    a save writes) and leaves the files it lists to the load: each is hashed once in all."""
    source = _checkpoint(tmp_path, "b", 20, 2)
    files = {name: (source / name).read_bytes() for name in ("model.safetensors", "rng.json")}
    _leftover(tmp_path, checkpoint_name(20), "tmp", _dead_pid(), source)
    seen = []
    monkeypatch.setattr(hashlib, "sha256", _Digests(seen))
    model = _load(tmp_path / checkpoint_name(20))
    monkeypatch.undo()
    _same(_model(2), model)
    assert {name: seen.count(data) for name, data in files.items()} == dict.fromkeys(files, 1)


def test_pruning_reads_each_checkpoint_once(tmp_path, monkeypatch):
    for step in (1, 2, 3):
        save_checkpoint(tmp_path / checkpoint_name(step), _model(step), config={}, step=step)
    manifests = [p.joinpath("checkpoint.json").read_bytes() for p in list_checkpoints(tmp_path)]
    seen = []
    monkeypatch.setattr(hashlib, "sha256", _Digests(seen))
    assert [p.name for p in prune_checkpoints(tmp_path, keep_last=2)] == [checkpoint_name(1)]
    monkeypatch.undo()
    assert [seen.count(data) for data in manifests] == [1, 1, 1]


def test_a_half_written_new_copy_gives_back_the_previous_one(tmp_path):
    pid = _dead_pid()
    _leftover(tmp_path, checkpoint_name(20), "old", pid, _checkpoint(tmp_path, "a", 20, 1))
    half = _leftover(tmp_path, checkpoint_name(20), "tmp", pid, _checkpoint(tmp_path, "b", 20, 2))
    (half / "checkpoint.sha256").unlink()  # killed before its last file
    _same(_model(1), _load(tmp_path / checkpoint_name(20)))  # named: recovered on load
    assert sorted(p.name for p in tmp_path.iterdir()) == [checkpoint_name(20)]


def test_a_complete_copy_not_yet_renamed_is_recovered(tmp_path):
    """Killed after the new folder was complete, before its only rename."""
    _checkpoint(tmp_path, checkpoint_name(10), 10)
    _leftover(tmp_path, checkpoint_name(20), "tmp", _dead_pid(), _checkpoint(tmp_path, "b", 20))
    save_checkpoint(tmp_path / checkpoint_name(30), _model(), config={}, step=30)
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        checkpoint_name(10), checkpoint_name(20), checkpoint_name(30)]


def test_a_previous_copy_already_replaced_is_removed(tmp_path):
    """Killed after both renames, before the previous copy was deleted."""
    _checkpoint(tmp_path, checkpoint_name(20), 20, 2)
    _leftover(tmp_path, checkpoint_name(20), "old", _dead_pid(), _checkpoint(tmp_path, "a", 20, 1))
    list_checkpoints(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [checkpoint_name(20)]
    _same(_model(2), _load(tmp_path / checkpoint_name(20)))


def test_a_downgraded_checkpoint_is_refused(tmp_path):
    """Issue 32's case: ``checkpoint.sha256`` deleted, ``format_version`` set to 1 and the
    config edited (``layer_norm_eps`` 0.1: the same shapes, other logits). Format 1 had no
    hash of ``checkpoint.json``, so nothing can tell this from a genuine format-1 folder:
    every unhashed checkpoint is refused, listed or loaded."""
    model = _model(0)
    path = save_checkpoint(tmp_path / "c", model, config={"model": {"layer_norm_eps": 1e-5}},
                           step=3)
    (path / "checkpoint.sha256").unlink()
    meta = json.loads((path / "checkpoint.json").read_text())
    meta["format_version"], meta["config"]["model"]["layer_norm_eps"] = 1, 0.1
    (path / "checkpoint.json").write_text(json.dumps(meta))
    refusal = (r"c/checkpoint.sha256: expected the sha256 of checkpoint.json \(format 2 "
               r"checkpoints have one\), received no such file$")
    for call in (lambda: load_checkpoint(path, _model(1)), lambda: load_checkpoint(path),
                 lambda: load_weights(path), lambda: list_checkpoints(tmp_path, "c")):
        with pytest.raises(BookError, match=refusal):
            call()
