"""Mixed precision's choices (train.runtime): "auto" times a product in fp32 and in 16 bits
on the device and trains in 16 bits where that is clearly faster; an explicit "bf16" is kept
wherever it runs; under CPU bf16 autocast the loss, attention's core and the weights stay
fp32 and a step matches the fp32 step; an optimizer step the scaler skips is reported, so
the schedule does not advance on it. GPUs are imitated by patching torch's answers, and the
timings by a timer of known speeds."""

from __future__ import annotations

import copy
import json
import random

import pytest
import torch

from transformer_book.nn.attention import fast_attention
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.train import runtime, step
from transformer_book.train.corpus import make_step_batch
from transformer_book.train.objective import make_optimizer
from transformer_book.train.runtime import (
    DistInfo,
    PrecisionChoice,
    autocast,
    choose_precision,
    make_scaler,
    optimizer_step,
    resolve_precision,
    time_product,
)
from transformer_book.train.step import Trainer, train_step
from transformer_book.util.validation import BookError

CUDA = torch.device("cuda")
CPU = torch.device("cpu")


@pytest.fixture
def gpu(monkeypatch):
    """Pretend to be a GPU of a given compute capability; ``is_bf16_supported`` says yes
    (it counts emulation), so only the capability may decide."""

    def pretend(major: int, minor: int, name: str = "Pretend GPU") -> None:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, minor))
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)

    return pretend


class Speeds:
    """A timer of known speeds: one ``(m, k) @ (k, n)`` product takes an overhead +
    2mkn / FLOP-rate seconds, at ``fp32`` FLOP/s in fp32 and ``low`` in 16 bits (the
    overheads: ``overhead`` in fp32, ``low_overhead`` in 16 bits, the same by default)."""

    def __init__(self, fp32: float, low: float, overhead: float = 0.0,
                 low_overhead: float | None = None) -> None:
        self.rates = {"fp32": fp32, "low": low}
        self.overheads = {"fp32": overhead,
                          "low": overhead if low_overhead is None else low_overhead}
        self.calls: list[tuple[str, torch.device, tuple[int, int, int]]] = []

    def __call__(self, precision: str, device: torch.device,
                 shape: tuple[int, int, int]) -> float:
        self.calls.append((precision, device, shape))
        rows, inner, outer = shape
        kind = "fp32" if precision == "fp32" else "low"
        return self.overheads[kind] + 2 * rows * inner * outer / self.rates[kind]

    @property
    def timed(self) -> float:
        """The seconds of every product timed (what the budget bounds)."""
        return sum(self(p, d, s) for p, d, s in list(self.calls))


def never(precision, device, shape):
    raise AssertionError("nothing is timed for an explicit precision")


@pytest.mark.parametrize(("capability", "low"), [
    ((7, 5), "fp16"),  # T4 (Colab's free GPU): bf16 only emulated
    ((7, 0), "fp16"),  # V100
    ((6, 0), "fp16"),  # P100
    ((8, 0), "bf16"),  # A100
    ((8, 6), "bf16"),  # RTX 30xx
    ((9, 0), "bf16"),  # H100, H200
])
def test_auto_on_cuda_times_bf16_from_capability_8_and_fp16_below(gpu, capability, low):
    gpu(*capability)
    timer = Speeds(fp32=20e12, low=300e12)
    assert resolve_precision("auto", CUDA, timer=timer) == low
    assert resolve_precision("auto", "cuda:0", timer=timer) == low
    assert {p for p, _, _ in timer.calls} == {"fp32", low}
    assert all(d.type == "cuda" for _, d, _ in timer.calls)


def test_auto_on_cuda_keeps_fp32_where_16_bits_are_slow(gpu):
    gpu(6, 1, "GeForce GTX 1080")  # fp16 at a small fraction of the fp32 rate
    choice = choose_precision("auto", CUDA, timer=Speeds(fp32=9e12, low=0.15e12))
    assert choice.precision == "fp32"
    assert "in fp16" in choice.reason and "GeForce GTX 1080" in choice.reason


@pytest.mark.parametrize(("bf16_rate", "expected"), [
    (4.0e11, "bf16"),  # 4x: an AVX512-BF16 or AMX CPU
    (1.25e11, "bf16"),  # just above the margin
    (1.1e11, "fp32"),  # faster, but not clearly
    (0.5e11, "fp32"),  # slower
    (1e9, "fp32"),  # only emulated, 100x slower
])
def test_auto_on_a_cpu_picks_bf16_where_the_timed_product_is_clearly_faster(bf16_rate,
                                                                            expected):
    timer = Speeds(fp32=1e11, low=bf16_rate)
    choice = choose_precision("auto", CPU, width=(256, 1024), timer=timer)
    assert choice.precision == expected and choice.asked == "auto"
    rows, inner, outer = choice.shape
    assert (inner, outer) == (256, 1024), "sized like the model's feed-forward product"
    assert set(choice.seconds) == {"fp32", "bf16"}
    assert choice.speedup == pytest.approx(bf16_rate / 1e11)
    assert choice.seconds["fp32"] == pytest.approx(2 * rows * inner * outer / 1e11)
    assert timer.timed < 0.5, "the timing stays well under a second"


def test_auto_times_products_the_size_of_the_work_where_it_can():
    """Fast products grow to the largest size (a GPU), slow ones stop early (a CPU that only
    emulates bf16), and a product whose time does not grow is never trusted."""
    fast = Speeds(fp32=50e12, low=500e12, overhead=1e-5)
    choice = choose_precision("auto", CPU, timer=fast)
    assert choice.shape == (16_384, 512, 2048) and choice.precision == "bf16"
    emulated = Speeds(fp32=1e11, low=1e9)
    choice = choose_precision("auto", CPU, timer=emulated)
    assert choice.precision == "fp32" and choice.shape[0] <= 32
    assert emulated.timed < 0.5


def test_auto_keeps_fp32_when_the_timed_work_is_a_busy_machines_stalls():
    """Each product stalls (other processes hold the cores), fp32's two threads 40 ms and
    bf16's 10 ms: bf16 looks faster at every size reached, though its products are 50x
    slower, but fp32's time never grows with the rows, so it proves nothing."""
    timer = Speeds(fp32=1e11, low=2e9, overhead=0.04, low_overhead=0.01)
    choice = choose_precision("auto", CPU, width=(256, 1024), timer=timer)
    assert choice.precision == "fp32" and choice.speedup > 1.2
    assert "cannot favour 16 bits" in choice.reason
    assert timer.timed < 0.5


@pytest.mark.parametrize("stalls", [0.3, 0.9])
def test_random_stalls_never_put_a_cpu_that_emulates_bf16_on_bf16(stalls):
    """A product stalls with probability ``stalls`` for up to 30 ms (another process held
    the core); bf16 is emulated, 50x slower. Over many draws "auto" stays fp32."""
    def stalling(seed):
        rng = random.Random(seed)
        work = Speeds(fp32=5e10, low=1e9)

        def timer(precision, device, shape):
            stall = rng.uniform(0.0, 0.03) if rng.random() < stalls else 0.0
            return work(precision, device, shape) + stall

        return timer

    picks = [choose_precision("auto", CPU, width=(256, 1024), timer=stalling(seed)).precision
             for seed in range(100)]
    assert picks == ["fp32"] * 100


def test_the_choice_goes_into_a_record():
    choice = choose_precision("auto", CPU, timer=Speeds(fp32=1e11, low=3e11))
    record = json.loads(json.dumps(choice.as_record()))
    assert record["precision"] == "bf16" and record["asked"] == "auto"
    assert record["matmul"]["shape"] == list(choice.shape)
    assert record["matmul"]["seconds"] == choice.seconds
    assert record["matmul"]["speedup"] == pytest.approx(3.0)
    assert record["matmul"]["margin"] == 1.2
    assert "3.00x" in record["reason"]
    explicit = choose_precision("fp32", CPU).as_record()
    assert explicit == {"precision": "fp32", "asked": "fp32", "reason": "asked for",
                        "matmul": None}


@pytest.mark.parametrize("device", [CPU, "cpu"])
def test_explicit_bf16_is_honoured_on_any_cpu_without_timing(device):
    choice = choose_precision("bf16", device, timer=never)
    assert choice == PrecisionChoice("bf16", "bf16", "asked for")


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="bf16 may run on this MPS")
def test_bf16_where_it_cannot_run_is_refused_and_auto_stays_fp32():
    with pytest.raises(BookError, match=r"precision: expected 'auto' or 'fp32' on Apple GPU "
                                        r"\(Metal\) \(bf16 autocast does not run on mps\), "
                                        r"received 'bf16'"):
        resolve_precision("bf16", "mps", timer=never)
    choice = choose_precision("auto", "mps", timer=never)
    assert choice.precision == "fp32" and "does not run" in choice.reason


@pytest.mark.parametrize("device", [CPU, "mps"])
def test_fp32_and_fp16_off_cuda_are_fp32(device):
    assert resolve_precision("fp32", device, timer=never) == "fp32"
    assert resolve_precision("fp16", device, timer=never) == "fp32"


def test_explicit_choices_are_kept_where_the_gpu_has_them(gpu):
    gpu(8, 0)
    assert [resolve_precision(p, CUDA, timer=never) for p in ("fp32", "bf16", "fp16")] == [
        "fp32", "bf16", "fp16"]
    gpu(7, 5)
    assert [resolve_precision(p, CUDA, timer=never) for p in ("fp32", "fp16")] == ["fp32",
                                                                                  "fp16"]


def test_bf16_asked_on_a_gpu_without_native_bf16_is_refused(gpu):
    gpu(7, 5, "Tesla T4")
    with pytest.raises(BookError, match=r"precision: expected 'auto', 'fp16' or 'fp32' on "
                                        r"Tesla T4 \(compute capability 7\.5 < 8\.0.*"
                                        r"received 'bf16'"):
        resolve_precision("bf16", CUDA, timer=never)


@pytest.mark.parametrize("bad", ["fp8", "BF16", None, 16])
def test_an_unknown_precision_is_refused(bad):
    with pytest.raises(BookError, match=r"precision: expected one of \['auto', 'fp32', "
                                        r"'bf16', 'fp16'\], received"):
        resolve_precision(bad, CPU)


@pytest.mark.parametrize("bad", [(512,), (512, 0), (512.0, 2048), 512, (True, 2048)])
def test_a_bad_width_is_refused(bad):
    with pytest.raises(BookError, match=r"width: expected \(d_model, d_ff\), two positive "
                                        r"ints, received"):
        choose_precision("auto", CPU, width=bad, timer=never)


def test_several_processes_train_in_rank_0s_choice(monkeypatch):
    """This process's timing said bf16; rank 0's said fp32: the broadcast one is kept."""
    main = PrecisionChoice("fp32", "auto", "rank 0's timing")
    sent = []

    def broadcast(objects, src):
        sent.append((list(objects), src))
        objects[0] = main

    monkeypatch.setattr(runtime.dist, "broadcast_object_list", broadcast)
    timer = Speeds(fp32=1e11, low=4e11)
    assert choose_precision("auto", CPU, timer=timer, info=DistInfo(1, 2, 1)) is main
    [(objects, src)] = sent
    assert src == 0 and objects[0].precision == "bf16", "this process's own choice was sent"
    assert choose_precision("auto", CPU, timer=timer, info=DistInfo()).precision == "bf16"
    assert len(sent) == 1, "one process broadcasts nothing"


def test_time_product_times_a_real_product_without_touching_the_global_rng():
    state = torch.get_rng_state()
    seconds = [time_product(p, CPU, (8, 16, 32)) for p in ("fp32", "bf16")]
    assert all(0 < s < 10 for s in seconds)
    assert torch.equal(torch.get_rng_state(), state)


def test_auto_on_this_cpu_decides_within_a_second():
    """The real timer on this machine: whichever it picks, it says why, quickly."""
    import time

    start = time.perf_counter()
    choice = choose_precision("auto", CPU, width=(64, 128))
    assert time.perf_counter() - start < 2.0
    assert choice.precision in ("fp32", "bf16") and choice.shape[1:] == (64, 128)
    assert choice.seconds["fp32"] > 0 and choice.seconds["bf16"] > 0


# ----------------------------------------------------------------- a bf16 step on a CPU


def _tiny_model() -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig.preset("tiny", 40, d_model=32, num_heads=4, d_ff=64,
                                      num_encoder_layers=1, num_decoder_layers=1,
                                      dropout=0.0, max_len=32)
    return Transformer(config)


def _step_batch():
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(3, 10, (2, 12), generator=g).tolist()
    src = [torch.randint(4, 40, (k,), generator=g).tolist() for k in lengths[0]]
    tgt = [torch.randint(4, 40, (k,), generator=g).tolist() for k in lengths[1]]
    return make_step_batch(src, tgt, [list(range(12))], CPU)  # padding in the batch


def _one_step(model: Transformer, precision: str, optimizer, monkeypatch):
    """One train_step; returns its result, the logits' dtype out of the model and the
    dtypes the loss was computed from and in."""
    seen: dict[str, torch.dtype] = {}
    hook = model.generator.register_forward_hook(
        lambda module, inputs, output: seen.__setitem__("logits", output.dtype))
    loss_fn = step.label_smoothed_cross_entropy

    def recording(logits, *args, **kwargs):
        loss = loss_fn(logits, *args, **kwargs)
        seen["loss input"], seen["loss"] = logits.dtype, loss.dtype
        return loss

    monkeypatch.setattr(step, "label_smoothed_cross_entropy", recording)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1.0)
    trainer = Trainer(model, optimizer, scheduler, 0.1, precision, None, None)
    result = train_step(trainer, _step_batch())
    hook.remove()
    return result, seen


def test_a_cpu_bf16_step_keeps_loss_and_weights_fp32_and_matches_the_fp32_step(monkeypatch):
    """Products in bf16; the loss (log-softmax over the vocabulary) from float32 logits, in
    float32; the parameters and Adam's moments float32; attention's softmax in fp32 (its
    own test below). One SGD step moves the weights as the fp32 step does, to bf16's
    accuracy (~3 significant digits, summed over a forward and a backward pass)."""
    model = _tiny_model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    moved = {}
    for precision in ("fp32", "bf16"):
        trained = copy.deepcopy(model)
        optimizer = torch.optim.SGD(trained.parameters(), lr=0.5)
        result, seen = _one_step(trained, precision, optimizer, monkeypatch)
        assert seen["logits"] == (torch.bfloat16 if precision == "bf16" else torch.float32)
        assert seen["loss input"] == torch.float32 and seen["loss"] == torch.float32
        assert all(p.dtype == torch.float32 for p in trained.parameters())
        moved[precision] = (result.loss, {n: p.detach() - before[n]
                                          for n, p in trained.named_parameters()})
    (loss32, step32), (loss16, step16) = moved["fp32"], moved["bf16"]
    assert loss16 == pytest.approx(loss32, rel=1e-2)
    for name, update in step32.items():
        error = (step16[name] - update).norm() / update.norm()
        assert error < 0.05, f"{name}: the bf16 step is {error:.3f} away from fp32's"
    assert any(not torch.equal(step16[n], step32[n]) for n in step32), "bf16 did run"


def test_adam_keeps_float32_moments_under_cpu_bf16(monkeypatch):
    model = _tiny_model()
    optimizer, _ = make_optimizer(model, 32, warmup_steps=4)
    _one_step(model, "bf16", optimizer, monkeypatch)
    states = [optimizer.state[p] for p in model.parameters()]
    assert all(s["exp_avg"].dtype == s["exp_avg_sq"].dtype == torch.float32 for s in states)
    assert all(p.dtype == torch.float32 for p in model.parameters())


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
