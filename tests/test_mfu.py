"""benchmarks/mfu.py, the base model's MFU benchmark: end to end on a CPU (tiny sizes), its
FLOP count equal to FlopCounterMode's, its arithmetic, its refusals. No speed is judged here."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from transformer_book.analysis.compute import peak_flops, training_flops
from transformer_book.nn.config import TransformerConfig
from transformer_book.train import runtime

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("mfu", REPO_ROOT / "benchmarks" / "mfu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_runs_end_to_end_on_a_cpu_and_writes_its_record(bench, tmp_path, capsys, monkeypatch):
    # a CPU where bf16 is no faster: the measured choice is fp32
    monkeypatch.setattr(runtime, "time_product",
                        lambda precision, device, shape: 1e-11 * shape[0] * shape[1] * shape[2])
    code = bench.main(["--steps", "2", "--tokens", "512", "--device", "cpu", "--warmup", "1",
                       "--backend", "aot_eager", "--results", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    [path] = tmp_path.glob("mfu-base-cpu-*.json")
    assert f"record: {path}" in out
    record = json.loads(path.read_text())
    assert record["kind"] == "mfu" and record["precision"] == "fp32"  # no autocast there
    assert record["model_config"]["d_model"] == 512 and record["model_config"]["d_ff"] == 2048
    assert record["model_config"]["num_encoder_layers"] == 6 and record["config"] == "base"
    assert record["batch"] == {"pairs": 16, "length": 32, "tokens_per_step": 1024}
    config = TransformerConfig.from_dict(record["model_config"])
    assert record["flops_per_step"] == training_flops(config, 32, 32, 16)
    assert record["counted_flops_per_step"] == record["flops_per_step"], "the formula is exact"
    assert record["hardware_peak"]["peak_flops"] is None  # a CPU has no entry in the table
    assert set(record["modes"]) == {"eager", "compile"}
    for row in record["modes"].values():
        assert len(row["step_seconds"]) == 2 and len(row["warmup_seconds"]) == 1
        assert row["tokens_per_second"] == pytest.approx(1024 / row["seconds_per_step"])
        assert row["flops_per_second"] == pytest.approx(
            record["flops_per_step"] / row["seconds_per_step"])
        assert row["mfu"] is None


def test_mfu_is_the_model_flops_over_the_dense_bf16_peak(bench):
    hardware = {"device_name": "NVIDIA H200", "accelerator": "H200",
                "peak_flops": peak_flops("H200", "bf16")}
    timing = {"step_seconds": [0.02, 0.03, 0.025], "total_seconds": 0.075,
              "warmup_seconds": [9.0]}
    row = bench.summarise(timing, step_flops=10**13, counted=10**13 + 10**11,
                          tokens_per_step=50_000, flops_per_token=10**13 / 50_000,
                          hardware=hardware, precision="bf16")
    assert row["seconds_per_step"] == pytest.approx(0.025)
    assert row["median_seconds_per_step"] == pytest.approx(0.025)
    assert row["tokens_per_second"] == pytest.approx(2e6)
    assert row["flops_per_second"] == pytest.approx(4e14)
    assert row["counted_flops_per_second"] == pytest.approx(4.04e14)
    assert row["mfu"] == pytest.approx(4e14 / 989.5e12)
    assert row["first_step_seconds"] == 9.0


def test_a_cpu_has_no_peak_and_says_so(bench):
    hardware = bench.peak(torch.device("cpu"), "fp32")
    assert hardware["peak_flops"] is None and hardware["accelerator"] is None
    assert "no peak" in hardware["note"]


def test_the_batch_holds_the_asked_tokens_without_padding(bench):
    config = TransformerConfig.preset("tiny", 50)
    batch = bench.synthetic_batch(config, 100, 8, torch.device("cpu"), seed=0)
    [(src, tgt_in, tgt_out)] = batch.micro
    assert src.shape == tgt_in.shape == tgt_out.shape == (12, 8)
    assert batch.source_tokens == batch.target_tokens == 96
    assert bool((tgt_in[:, 0] == config.bos_id).all())
    assert torch.equal(tgt_in[:, 1:], tgt_out[:, :-1]), "teacher forcing: shifted by one"
    assert int(src.min()) >= 4 and int(src.max()) < 50  # no <pad>, <bos>, <eos>, <unk>


@pytest.mark.parametrize(("argv", "message"), [
    (["--steps", "0"], "--steps: expected an integer >= 1, received 0"),
    (["--warmup", "-1"], "--warmup: expected an integer >= 0, received -1"),
    (["--tokens", "16", "--length", "32"], "--tokens: expected at least --length (32)"),
    (["--modes", "jit"], "invalid choice: 'jit'"),
])
def test_bad_arguments_are_refused_before_any_work(bench, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--device", "tpu"], "prefer: expected None or one of"),
    (["--precision", "fp8", "--device", "cpu"], "precision: expected one of"),
    (["--config", "no/such.toml", "--device", "cpu"], "no/such.toml"),
])
def test_bad_device_precision_or_config_is_one_line_and_exit_2(bench, argv, message, capsys,
                                                               tmp_path):
    assert bench.main([*argv, "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mfu: error: ") and message in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir()), "no record"


def test_is_not_picked_up_by_make_bench():
    """run_all.py runs every bench_*.py on the CPU; the MFU benchmark is for a GPU."""
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("run_all",
                                                      REPO_ROOT / "benchmarks" / "run_all.py")
        run_all = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(run_all)
    finally:
        sys.path.remove(str(REPO_ROOT / "benchmarks"))
    assert "mfu" not in [p.stem for p in run_all.discover()]
