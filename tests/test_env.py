"""transformer_book.util.env: device choice, seeding, the environment report."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from transformer_book.util import env


def test_get_device_prefers_cuda_then_mps_then_cpu(monkeypatch):
    monkeypatch.setattr(env, "_available", lambda kind: kind in {"mps", "cpu"})
    assert env.get_device() == torch.device("mps")
    monkeypatch.setattr(env, "_available", lambda kind: True)
    assert env.get_device() == torch.device("cuda")
    monkeypatch.setattr(env, "_available", lambda kind: kind == "cpu")
    assert env.get_device() == torch.device("cpu")


def test_get_device_cuda_without_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(env, "_available", lambda kind: kind == "cpu")
    with pytest.raises(
        ValueError, match=r"prefer: 'cuda' was requested but this machine has no cuda"
    ):
        env.get_device("cuda")


def test_get_device_rejects_unknown_names():
    with pytest.raises(ValueError, match=r"prefer: expected None or one of .*received 'tpu'"):
        env.get_device("tpu")
    with pytest.raises(ValueError, match="prefer"):
        env.get_device(3)  # type: ignore[arg-type]


def test_get_device_cpu_with_index():
    assert env.get_device("cpu") == torch.device("cpu")


def test_set_seed_makes_all_generators_repeat():
    env.set_seed(123)
    first = (random.random(), np.random.rand(), torch.rand(3))  # noqa: NPY002
    env.set_seed(123)
    second = (random.random(), np.random.rand(), torch.rand(3))  # noqa: NPY002
    assert first[0] == second[0] and first[1] == second[1]
    assert torch.equal(first[2], second[2])


@pytest.mark.parametrize("seed", [-1, 1.5, "0", True])
def test_set_seed_rejects_bad_seeds(seed):
    with pytest.raises(ValueError, match="seed: expected a non-negative integer"):
        env.set_seed(seed)


def test_in_colab_reads_sys_modules(monkeypatch):
    import sys
    import types

    assert env.in_colab() is False
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    assert env.in_colab() is True


def test_environment_report_has_versions_device_and_threads():
    report = env.environment_report()
    assert report["packages"]["torch"].startswith(torch.__version__.split("+")[0])
    assert report["device"] in env.DEVICE_ORDER
    assert report["torch_threads"] == torch.get_num_threads()
    text = env.format_report(report)
    assert "torch" in text and "torch_threads" in text
