"""train/fused_loss.py: the generator and the label-smoothed loss in one pass, against the
plain path (``generator`` then ``label_smoothed_cross_entropy``), in float64 on fresh random
inputs: the loss and every gradient, with padding, bias, tied embeddings and chunks of every
size; under bf16 autocast within bf16's rounding; a training step on either path; refusals."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.train.fused_loss import fused_label_smoothed_loss
from transformer_book.train.objective import label_smoothed_cross_entropy, make_optimizer
from transformer_book.train.step import Trainer
from transformer_book.util.validation import BookError

PAD = 0


def _case(seed: int, bias: bool, dtype=torch.float64, b=3, t=7, d=16, vocab=50):
    generator = torch.Generator().manual_seed(seed)
    linear = nn.Linear(d, vocab, bias=bias).to(dtype)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(vocab, d, generator=generator, dtype=dtype))
        if bias:
            linear.bias.copy_(torch.randn(vocab, generator=generator, dtype=dtype))
    hidden = torch.randn(b, t, d, generator=generator, dtype=dtype, requires_grad=True)
    targets = torch.randint(1, vocab, (b, t), generator=generator)
    lengths = torch.randint(1, t + 1, (b,), generator=generator)
    targets[torch.arange(t)[None, :] >= lengths[:, None]] = PAD  # padded rows
    return hidden, linear, targets


def _plain(hidden, linear, targets, smoothing):
    return label_smoothed_cross_entropy(linear(hidden), targets, smoothing, PAD, reduction="sum")


def _gradients(loss, hidden, linear):
    wanted = [hidden, linear.weight] + ([linear.bias] if linear.bias is not None else [])
    return torch.autograd.grad(loss, wanted)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 3, 5, 512])
def test_equal_to_the_plain_path_in_float64(seed, bias, rows):
    hidden, linear, targets = _case(seed, bias)
    smoothing = [0.0, 0.1, 0.3, 1.0, 0.1, 0.05][seed]
    plain = _plain(hidden, linear, targets, smoothing)
    fused = fused_label_smoothed_loss(hidden, linear, targets, smoothing, PAD, rows=rows)
    assert fused.dtype == torch.float64
    torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-12)
    for ours, theirs in zip(_gradients(fused * 1.7, hidden, linear),
                            _gradients(plain * 1.7, hidden, linear), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-11, atol=1e-12)


def test_padding_gets_no_gradient_and_no_loss():
    hidden, linear, targets = _case(0, True)
    targets[1] = PAD
    loss = fused_label_smoothed_loss(hidden, linear, targets, 0.1, PAD)
    (grad_hidden,) = torch.autograd.grad(loss, [hidden])
    assert torch.count_nonzero(grad_hidden[1]) == 0
    torch.testing.assert_close(loss, _plain(hidden, linear, targets, 0.1))


def test_tied_embeddings_get_one_summed_gradient():
    """The generator's weight is the target embedding (Section 3.4): the weight's gradient is
    the embedding's plus the generator's, on either path."""
    torch.manual_seed(1)
    config = TransformerConfig.preset("tiny", 40, dropout=0.0, max_len=16)
    model = Transformer(config).double()
    assert model.generator.weight is model.tgt_embed.weight
    src, tgt = torch.randint(4, 40, (2, 5)), torch.randint(4, 40, (2, 6))
    out = torch.randint(4, 40, (2, 6))
    out[0, 4:] = PAD
    plain = label_smoothed_cross_entropy(model(src, tgt), out, 0.1, PAD, reduction="sum")
    (plain_grad,) = torch.autograd.grad(plain, [model.tgt_embed.weight])
    fused = fused_label_smoothed_loss(model.hidden(src, tgt), model.generator, out, 0.1, PAD)
    (fused_grad,) = torch.autograd.grad(fused, [model.tgt_embed.weight])
    torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fused_grad, plain_grad, rtol=1e-10, atol=1e-12)


def test_without_gradients_only_the_loss():
    hidden, linear, targets = _case(2, True)
    with torch.no_grad():
        loss = fused_label_smoothed_loss(hidden, linear, targets, 0.1, PAD)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, _plain(hidden.detach(), linear, targets, 0.1).detach())


def test_bf16_autocast_within_rounding_of_the_plain_path():
    hidden, linear, targets = _case(3, True, dtype=torch.float32, b=4, t=9, d=32, vocab=300)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = fused_label_smoothed_loss(hidden, linear, targets, 0.1, PAD, rows=7)
        logits = linear(hidden)
    plain = label_smoothed_cross_entropy(logits.float(), targets, 0.1, PAD, reduction="sum")
    assert fused.dtype == torch.float32
    torch.testing.assert_close(fused, plain, rtol=2e-2, atol=0.0)
    ours, theirs = _gradients(fused, hidden, linear), _gradients(plain, hidden, linear)
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype
        assert (a - b).norm() <= 0.03 * b.norm()


def test_a_training_step_on_either_path_gives_the_same_weights():
    from transformer_book.train.corpus import StepBatch
    from transformer_book.train.step import train_step

    torch.manual_seed(4)
    config = TransformerConfig.preset("tiny", 40, dropout=0.0, max_len=16)
    models = [Transformer(config).double() for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    src, tgt_in = torch.randint(4, 40, (3, 6)), torch.randint(4, 40, (3, 5))
    tgt_out = torch.randint(4, 40, (3, 5))
    tgt_out[2, 3:] = PAD
    batch = StepBatch(micro=[(src, tgt_in, tgt_out)], target_tokens=13, source_tokens=18)
    results = []
    for model, fused in zip(models, [False, True], strict=True):
        optimizer, scheduler = make_optimizer(model, config.d_model, 10)
        trainer = Trainer(model=model, optimizer=optimizer, scheduler=scheduler,
                          label_smoothing=0.1, clip_norm=1.0, fused_loss=fused)
        results.append(train_step(trainer, batch))
    assert results[0].loss == pytest.approx(results[1].loss, rel=1e-12)
    # Adam's first step moves each weight by about the learning rate whatever its gradient,
    # so a gradient of 1e-17 on one path and 0 on the other moves it by ~1e-12 apart.
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-9)


def test_bad_input_is_named():
    hidden, linear, targets = _case(0, False)
    with pytest.raises(BookError, match=r"^targets: expected shape"):
        fused_label_smoothed_loss(hidden, linear, targets[:, :3], 0.1, PAD)
    with pytest.raises(BookError, match=r"^generator: expected an nn.Linear"):
        fused_label_smoothed_loss(hidden, nn.Identity(), targets, 0.1, PAD)
    with pytest.raises(BookError, match=r"^smoothing"):
        fused_label_smoothed_loss(hidden, linear, targets, 1.5, PAD)
    with pytest.raises(BookError, match=r"^rows"):
        fused_label_smoothed_loss(hidden, linear, targets, 0.1, PAD, rows=0)
