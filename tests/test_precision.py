"""Mixed precision's choices (train.runtime): bf16 only where the GPU has it natively, fp16
with loss scaling below, fp32 off CUDA except "auto" and "bf16" on a CPU with bf16 matrix
units (AMX); an optimizer step the scaler skips is reported, so the schedule does not
advance on it. The GPU and the CPU's units are imitated by patching torch's answers."""

from __future__ import annotations

import pytest
import torch

from transformer_book.nn.attention import fast_attention
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.train import runtime
from transformer_book.train.corpus import make_step_batch
from transformer_book.train.objective import make_optimizer
from transformer_book.train.runtime import (
    autocast,
    make_scaler,
    optimizer_step,
    resolve_precision,
)
from transformer_book.train.step import Trainer, train_step
from transformer_book.util.validation import BookError

CUDA = torch.device("cuda")


@pytest.fixture
def gpu(monkeypatch):
    """Pretend to be a GPU of a given compute capability; ``is_bf16_supported`` says yes
    (it counts emulation), so only the capability may decide."""

    def pretend(major: int, minor: int, name: str = "Pretend GPU") -> None:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, minor))
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)

    return pretend


@pytest.mark.parametrize(("capability", "expected"), [
    ((7, 5), "fp16"),  # T4 (Colab's free GPU): bf16 only emulated
    ((7, 0), "fp16"),  # V100
    ((6, 0), "fp16"),  # P100
    ((8, 0), "bf16"),  # A100
    ((8, 6), "bf16"),  # RTX 30xx
    ((9, 0), "bf16"),  # H100, H200
])
def test_auto_is_bf16_from_compute_capability_8_and_fp16_below(gpu, capability, expected):
    gpu(*capability)
    assert resolve_precision("auto", CUDA) == expected
    assert resolve_precision("auto", "cuda:0") == expected


@pytest.fixture
def amx(monkeypatch):
    """Pretend that this CPU has bf16 matrix units (Intel AMX), or that it has none."""

    def pretend(present: bool) -> None:
        monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: present)

    return pretend


@pytest.mark.parametrize("precision", ["auto", "fp32", "bf16", "fp16"])
def test_off_cuda_without_bf16_units_every_precision_is_fp32(amx, precision):
    amx(False)
    assert resolve_precision(precision, torch.device("cpu")) == "fp32"
    assert resolve_precision(precision, "mps") == "fp32"


@pytest.mark.parametrize(("precision", "expected"), [
    ("auto", "bf16"), ("bf16", "bf16"), ("fp32", "fp32"), ("fp16", "fp32")])
def test_a_cpu_with_bf16_units_trains_auto_and_bf16_in_bf16(amx, precision, expected):
    amx(True)
    assert resolve_precision(precision, torch.device("cpu")) == expected
    assert resolve_precision(precision, "mps") == "fp32"  # the check is the CPU's, not MPS's


def test_the_cpu_check_asks_for_amx_tiles(monkeypatch):
    for present in (True, False):
        flags = {"amx_tile": present, "avx512_bf16": True}
        monkeypatch.setattr(torch.cpu, "get_capabilities", lambda f=flags: f)
        assert runtime.cpu_has_native_bf16() is present
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"avx2": True})
    assert runtime.cpu_has_native_bf16() is False  # a flag missing is no AMX
    monkeypatch.delattr(torch.cpu, "get_capabilities")
    assert runtime.cpu_has_native_bf16() is False  # an older PyTorch without the query


def test_explicit_choices_are_kept_where_the_gpu_has_them(gpu):
    gpu(8, 0)
    assert [resolve_precision(p, CUDA) for p in ("fp32", "bf16", "fp16")] == ["fp32", "bf16",
                                                                               "fp16"]
    gpu(7, 5)
    assert [resolve_precision(p, CUDA) for p in ("fp32", "fp16")] == ["fp32", "fp16"]


def test_bf16_asked_on_a_gpu_without_native_bf16_is_refused(gpu):
    gpu(7, 5, "Tesla T4")
    with pytest.raises(BookError, match=r"precision: expected 'auto', 'fp16' or 'fp32' on "
                                        r"Tesla T4 \(compute capability 7\.5 < 8\.0.*"
                                        r"received 'bf16'"):
        resolve_precision("bf16", CUDA)


@pytest.mark.parametrize("bad", ["fp8", "BF16", None, 16])
def test_an_unknown_precision_is_refused(bad):
    with pytest.raises(BookError, match=r"precision: expected one of \['auto', 'fp32', "
                                        r"'bf16', 'fp16'\], received"):
        resolve_precision(bad, torch.device("cpu"))


def test_autocast_and_scaler_follow_the_resolved_precision():
    cpu = torch.device("cpu")
    assert make_scaler("fp32", cpu) is None and make_scaler("bf16", cpu) is None
    assert isinstance(make_scaler("fp16", cpu), torch.amp.GradScaler)
    with autocast("bf16", cpu):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with autocast("fp32", cpu):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    with pytest.raises(BookError, match="precision: expected one of"):
        autocast("auto", cpu)  # resolve it first
    with pytest.raises(BookError, match="precision: expected one of"):
        make_scaler("auto", cpu)


def _overflowing(weight: torch.nn.Parameter, scaler: torch.amp.GradScaler | None,
                 factor: float) -> None:
    loss = (weight * factor).sum()
    (scaler.scale(loss) if scaler is not None else loss).backward()


def test_optimizer_step_reports_a_step_the_scaler_skipped():
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    _overflowing(weight, scaler, 1e35)  # 1e35 x 65536: the scaled gradient is inf
    assert optimizer_step(optimizer, scaler) is False
    assert torch.equal(weight.detach(), torch.ones(3)), "the skipped step changed nothing"
    assert scaler.get_scale() == 2.0**15, "the scale backed off"
    optimizer.zero_grad()
    _overflowing(weight, scaler, 1.0)
    assert optimizer_step(optimizer, scaler) is True
    torch.testing.assert_close(weight.detach(), torch.full((3,), 0.9))
    optimizer.zero_grad()
    _overflowing(weight, None, 1.0)
    assert optimizer_step(optimizer, None) is True  # fp32/bf16: always stepped


def test_train_step_does_not_advance_the_schedule_on_a_skipped_step():
    torch.manual_seed(0)
    config = TransformerConfig.preset("tiny", 16, d_model=8, num_heads=2, d_ff=16,
                                      num_encoder_layers=1, num_decoder_layers=1,
                                      dropout=0.0, max_len=16)
    model = Transformer(config)
    optimizer, scheduler = make_optimizer(model, 8, warmup_steps=4)
    scaler = torch.amp.GradScaler("cpu")
    # An fp16 gradient that overflowed: inf in one parameter's gradient.
    model.generator.weight.register_hook(lambda grad: grad + float("inf"))
    trainer = Trainer(model, optimizer, scheduler, 0.1, "fp32", None, scaler)
    before = [p.detach().clone() for p in model.parameters()]
    lr = optimizer.param_groups[0]["lr"]
    train_step(trainer, make_step_batch([[3, 4, 5]], [[6, 7]], [[0]], torch.device("cpu")))
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    assert scaler.get_scale() < 2.0**16, "the scaler skipped the step and backed off"
    assert scheduler.last_epoch == 0 and optimizer.param_groups[0]["lr"] == lr


@pytest.mark.parametrize("is_causal", [False, True])
def test_under_cpu_bf16_autocast_attention_core_runs_in_fp32(is_causal):
    """The projections run in bf16, the core in fp32 (torch's CPU flash attention is far
    slower backward in bf16): the same values and gradients as without autocast."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 7, 8, generator=g, requires_grad=True) for _ in range(3))
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[1, ..., 5:] = False  # padding in the second sentence
    plain = fast_attention(q, k, v, mask, is_causal, 0.0)
    grads = torch.autograd.grad(plain.square().sum(), (q, k, v))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = fast_attention(q, k, v, mask, is_causal, 0.0)
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed, plain, rtol=0, atol=0)
    mixed_grads = torch.autograd.grad(mixed.square().sum(), (q, k, v))
    for got, want in zip(mixed_grads, grads, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
