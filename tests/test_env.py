"""transformer_book.util.env: device choice, seeding, the environment report."""

from __future__ import annotations

import random
import sys
import types

import numpy as np
import pytest
import torch

from transformer_book.util import env
from transformer_book.util.validation import BookError


def _machine(monkeypatch, *kinds):
    """Pretend the machine has the GPUs in ``kinds`` ("cuda", "mps"), and a CPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: "cuda" in kinds)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: "mps" in kinds)


def test_get_device_prefers_cuda_then_mps_then_cpu(monkeypatch):
    _machine(monkeypatch, "mps")
    assert env.get_device() == torch.device("mps")
    _machine(monkeypatch, "cuda", "mps")
    assert env.get_device() == torch.device("cuda")
    _machine(monkeypatch)
    assert env.get_device() == torch.device("cpu")


def test_get_device_cuda_without_gpu_is_a_clear_error(monkeypatch):
    _machine(monkeypatch)
    with pytest.raises(
        BookError, match=r"prefer: 'cuda' was requested but this machine has no cuda"
    ):
        env.get_device("cuda")


def test_get_device_rejects_unknown_names():
    with pytest.raises(BookError, match=r"prefer: expected None or one of .*received 'tpu'"):
        env.get_device("tpu")
    with pytest.raises(BookError, match="prefer"):
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
    with pytest.raises(BookError, match=r"seed: expected an integer >= 0, received"):
        env.set_seed(seed)


def test_in_colab_reads_sys_modules(monkeypatch):
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


def test_torch_threads_sets_and_restores():
    before = torch.get_num_threads()
    with env.torch_threads(2):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError, match="inside"), env.torch_threads(1):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before


def test_device_name_describes_the_cpu():
    name = env.device_name("cpu")
    assert isinstance(name, str) and name


def test_cpu_name_reads_the_model_name(tmp_path):
    from transformer_book.util.env import cpu_name

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n")
    assert cpu_name(info) == "AMD EPYC 7B13"
    info.write_text("model name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16 sse\n"
                    "model name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16 sse\n")
    assert cpu_name(info) == "AMD EPYC (AVX2, AVX-512, AVX512-BF16)"  # AVX2 alone differs
    info.write_text("processor\t: 0\n")
    assert cpu_name(info) and cpu_name(info) != "AMD EPYC 7B13"  # platform's fallback
    assert cpu_name(tmp_path / "missing")
