"""The package on a CUDA GPU, what the GPU run (scripts/gpu_run.py --cuda-tests) checks first:
mixed-precision training steps against fp32, the fast attention path against the teaching
path, cached decoding against uncached, a checkpoint round trip and a compiled training step.

Every test is marked ``cuda`` and skipped without a GPU (``pytest -m cuda tests/test_cuda.py``
on a GPU machine). Each test's body is a ``check_*`` function of a device, so the same
comparisons are plain arithmetic on any device; on a GPU they run on ``cuda``.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from transformer_book.inference.beam import beam_search
from transformer_book.inference.greedy import greedy_decode
from transformer_book.nn.attention import MultiHeadAttention, causal_mask, padding_mask
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.run.checkpoint import checkpoint_name, load_checkpoint, save_checkpoint
from transformer_book.train.corpus import make_step_batch
from transformer_book.train.objective import make_optimizer
from transformer_book.train.runtime import autocast, make_scaler, resolve_precision
from transformer_book.train.step import Trainer, train_step

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

VOCAB = 40
CUDA = torch.device("cuda")


def _model(device: torch.device, seed: int = 0, dropout: float = 0.0) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig.preset("tiny", VOCAB, d_model=32, num_heads=4, d_ff=64,
                                      num_encoder_layers=2, num_decoder_layers=2,
                                      dropout=dropout, label_smoothing=0.1, max_len=64)
    return Transformer(config).to(device)


def _corpus(n: int = 24, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """Made-up pairs of ids 4..VOCAB-1 (no specials), 1 to 12 tokens: padding in every batch."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 13, (2, n), generator=generator).tolist()
    src = [torch.randint(4, VOCAB, (k,), generator=generator).tolist() for k in lengths[0]]
    tgt = [torch.randint(4, VOCAB, (k,), generator=generator).tolist() for k in lengths[1]]
    return src, tgt


def _padded_ids(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Source and target ids with padding (0) and one all-padding source row."""
    src = torch.tensor([[5, 6, 7, 8, 9, 2], [9, 10, 11, 2, 0, 0], [0, 0, 0, 0, 0, 0]])
    tgt = torch.tensor([[1, 4, 9, 11, 12, 2], [1, 12, 3, 2, 0, 0], [1, 5, 2, 0, 0, 0]])
    return src.to(device), tgt.to(device)


def _sgd_trainer(model: Transformer, precision: str, scaler=None) -> Trainer:
    """Plain SGD (an update proportional to the gradient, so precisions stay comparable
    after a step; Adam's first step is ±lr whatever the gradient's size)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1.0)
    return Trainer(model, optimizer, scheduler, 0.1, precision, 1.0, scaler)


def _losses(trainer: Trainer, device: torch.device, steps: int = 3) -> list[float]:
    src, tgt = _corpus()
    chunks = [[list(range(0, 12))], [list(range(12, 24))], [list(range(0, 24))]]
    return [train_step(trainer, make_step_batch(src, tgt, chunks[i % 3], device)).loss
            for i in range(steps)]


# ----------------------------------------------------------------- mixed-precision steps


def check_mixed_precision_steps_match_fp32(device: torch.device) -> None:
    """bf16 autocast and fp16 with a GradScaler: the same losses as fp32, step after step."""
    model = _model(device)
    reference = _losses(_sgd_trainer(copy.deepcopy(model), "fp32"), device)
    bf16 = _losses(_sgd_trainer(copy.deepcopy(model), "bf16"), device)
    # A modest initial scale: the test is about agreement, not about the scale's search.
    scaler = torch.amp.GradScaler(device.type, init_scale=2.0**8)
    fp16 = _losses(_sgd_trainer(copy.deepcopy(model), "fp16", scaler), device)
    assert scaler.get_scale() == 2.0**8, "no fp16 step was skipped"
    torch.testing.assert_close(torch.tensor(bf16), torch.tensor(reference), rtol=2e-2, atol=0)
    torch.testing.assert_close(torch.tensor(fp16), torch.tensor(reference), rtol=5e-3, atol=0)
    assert reference[2] < reference[0], "the steps trained"


def test_bf16_and_fp16_training_steps_match_fp32() -> None:
    check_mixed_precision_steps_match_fp32(CUDA)


def test_auto_precision_on_this_gpu_and_its_scaler() -> None:
    major, _ = torch.cuda.get_device_capability(CUDA)
    precision = resolve_precision("auto", CUDA)
    assert precision == ("bf16" if major >= 8 else "fp16")
    scaler = make_scaler(precision, CUDA)
    assert (scaler is not None) == (precision == "fp16")
    with autocast(precision, CUDA):
        dtype = (torch.ones(4, 4, device=CUDA) @ torch.ones(4, 4, device=CUDA)).dtype
    assert dtype == (torch.bfloat16 if precision == "bf16" else torch.float16)


# ----------------------------------------------------------------- attention paths


def check_attention_fast_path_equals_teaching_path(device: torch.device, dtype: torch.dtype,
                                                   tolerance: float) -> None:
    """MultiHeadAttention's fused path (F.scaled_dot_product_attention) against the explicit
    softmax(QKᵀ/√d_k)V, values and gradients, with padding, causal, padding & causal masks,
    and a query that sees no key at all."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4).to(device)
    src, _ = _padded_ids(device)
    x = torch.randn(3, 6, 32, device=device)
    padding = padding_mask(src, 0)  # (B, 1, 1, S); row 2 sees no key
    both = padding & causal_mask(6, device)
    for mask, is_causal in ((padding, False), (None, True), (padding, True), (both, False)):
        outputs, grads = [], []
        for need_weights in (False, True):
            query = x.clone().requires_grad_(True)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
                out, _ = mha(query, query, query, mask, is_causal, need_weights)
            out.float().square().sum().backward()
            outputs.append(out.float())
            grads.append(query.grad)
        torch.testing.assert_close(outputs[0], outputs[1], rtol=tolerance, atol=tolerance)
        torch.testing.assert_close(grads[0], grads[1], rtol=tolerance, atol=tolerance)


def check_model_fast_path_equals_teaching_path(device: torch.device) -> None:
    """The whole model: forward (fast path) equals encode + decode with need_weights (the
    teaching path) on a padded batch (encoder padding, decoder causal + cross padding)."""
    model = _model(device).eval()
    src, tgt = _padded_ids(device)
    with torch.no_grad():
        fast = model(src, tgt)
        memory, _ = model.encode(src, need_weights=True)
        teaching, _ = model.decode(tgt, memory, src, need_weights=True)
    torch.testing.assert_close(fast, teaching, rtol=1e-4, atol=1e-4)


def test_attention_fast_path_equals_teaching_path_fp32() -> None:
    check_attention_fast_path_equals_teaching_path(CUDA, torch.float32, 1e-4)


def test_attention_fast_path_equals_teaching_path_under_autocast() -> None:
    dtype = torch.bfloat16 if resolve_precision("auto", CUDA) == "bf16" else torch.float16
    check_attention_fast_path_equals_teaching_path(CUDA, dtype, 5e-2)


def test_model_fast_path_equals_teaching_path() -> None:
    check_model_fast_path_equals_teaching_path(CUDA)


# ----------------------------------------------------------------- decoding


def check_cached_decoding_equals_uncached(device: torch.device) -> None:
    """Greedy and beam search give the same outputs with and without the key/value cache,
    and a cached step's logits equal the full prefix's last position."""
    model = _model(device, seed=1).eval()
    src, tgt = _padded_ids(device)
    src = src[:2]  # sentences with real tokens
    kwargs = {"max_len_a": 0.0, "max_len_b": 10}
    assert greedy_decode(model, src, use_cache=True, **kwargs) == greedy_decode(
        model, src, use_cache=False, **kwargs)
    assert beam_search(model, src, 3, use_cache=True, **kwargs) == beam_search(
        model, src, 3, use_cache=False, **kwargs)
    with torch.no_grad():
        memory = model.encode(src)
        cache = model.new_cache()
        for t in range(5):
            step = model.decode(tgt[:2, t : t + 1], memory, src, cache=cache)[:, -1]
            full = model.decode(tgt[:2, : t + 1], memory, src)[:, -1]
            torch.testing.assert_close(step, full, rtol=1e-4, atol=1e-4)


def test_cached_decoding_equals_uncached() -> None:
    check_cached_decoding_equals_uncached(CUDA)


# ----------------------------------------------------------------- checkpoints


def check_checkpoint_round_trip(device: torch.device, folder: Path) -> None:
    """Weights and Adam's moments saved from ``device`` load back onto it, equal."""
    model = _model(device, seed=2)
    optimizer, scheduler = make_optimizer(model, 32, warmup_steps=4)
    trainer = Trainer(model, optimizer, scheduler, 0.1)
    _losses(trainer, device, steps=2)
    path = save_checkpoint(folder / checkpoint_name(2), model,
                           config={"model": model.config.to_dict()}, step=2,
                           optimizer=optimizer, scheduler=scheduler)
    fresh = _model(device, seed=3)
    fresh_optimizer, fresh_scheduler = make_optimizer(fresh, 32, warmup_steps=4)
    metadata = load_checkpoint(path, fresh, fresh_optimizer, fresh_scheduler,
                               map_location=device)
    assert metadata["step"] == 2
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(),
                            strict=True):
        assert b.device.type == device.type, name
        assert torch.equal(a, b), name
    moments = [s["exp_avg"] for s in fresh_optimizer.state.values()]
    assert moments and all(m.device.type == device.type for m in moments)
    for a, b in zip(optimizer.state.values(), fresh_optimizer.state.values(), strict=True):
        assert torch.equal(a["exp_avg"], b["exp_avg"]) and torch.equal(a["exp_avg_sq"],
                                                                       b["exp_avg_sq"])
    assert fresh_scheduler.last_epoch == scheduler.last_epoch == 2
    src, tgt = _padded_ids(device)
    model.eval()
    fresh.eval()
    with torch.no_grad():
        assert torch.equal(model(src, tgt), fresh(src, tgt))


def test_checkpoint_round_trip_on_cuda(tmp_path: Path) -> None:
    check_checkpoint_round_trip(CUDA, tmp_path)


# ----------------------------------------------------------------- torch.compile


def check_compiled_training_step(device: torch.device, backend: str) -> None:
    """train_step with ``torch.compile(model, fullgraph=True)``: the losses and weights of
    eager mode, step after step (dropout 0: deterministic)."""
    torch._dynamo.reset()
    model = _model(device)
    eager = copy.deepcopy(model)
    compiled = _sgd_trainer(model, "fp32")
    compiled.model = torch.compile(model, fullgraph=True, backend=backend)
    expected = _losses(_sgd_trainer(eager, "fp32"), device)
    torch.testing.assert_close(torch.tensor(_losses(compiled, device)), torch.tensor(expected),
                               rtol=1e-4, atol=1e-5)
    for (name, a), b in zip(eager.state_dict().items(), model.state_dict().values(),
                            strict=True):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-4, msg=name)


def test_compiled_training_step_equals_eager() -> None:
    check_compiled_training_step(CUDA, "inductor")
