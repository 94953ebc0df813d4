"""Rotary positions (nn/rotary.py), the position scheme that acts on queries and keys:
equal in float64 to the rotation written out as a matrix, relative by construction, the
same logits with and without the decoder's key/value cache, and end to end through the
command line (train, checkpoint, translate, evaluate; the export refuses it)."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_book.cli import main
from transformer_book.inference.beam import beam_search
from transformer_book.inference.greedy import greedy_decode
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.positional import POSITIONAL_ENCODINGS, positional_encoding
from transformer_book.nn.rotary import RotaryPositions, rotate_pairs
from transformer_book.nn.transformer import Transformer
from transformer_book.util.validation import BookError

F64 = torch.float64


def reference_rotation(d: int, position: int, base: float = 10000.0) -> torch.Tensor:
    """The ``(d, d)`` block-diagonal rotation of Su et al. (2021), eq. (15), written out."""
    r = torch.zeros(d, d, dtype=F64)
    for i in range(d // 2):
        angle = position * base ** (-2 * i / d)
        c, s = math.cos(angle), math.sin(angle)
        r[2 * i, 2 * i], r[2 * i, 2 * i + 1] = c, -s
        r[2 * i + 1, 2 * i], r[2 * i + 1, 2 * i + 1] = s, c
    return r


@pytest.mark.parametrize(("d", "offset"), [(2, 0), (8, 0), (16, 5), (32, 123)])
def test_the_rotation_is_the_written_out_matrix(d, offset):
    x = torch.randn(3, 2, 7, d, dtype=F64, generator=torch.Generator().manual_seed(d + offset))
    expected = torch.stack([x[..., t, :] @ reference_rotation(d, offset + t).T
                            for t in range(7)], dim=-2)
    torch.testing.assert_close(rotate_pairs(x, offset), expected, rtol=0, atol=1e-12)


def test_scores_depend_on_the_relative_position_only():
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(16, dtype=F64, generator=gen), torch.randn(16, dtype=F64, generator=gen)

    def score(m: int, n: int) -> float:
        qm = rotate_pairs(q.view(1, 16), m)[0]
        kn = rotate_pairs(k.view(1, 16), n)[0]
        return float(qm @ kn)

    for m, n, shift in ((3, 1, 10), (0, 7, 40), (5, 5, 99)):
        assert math.isclose(score(m, n), score(m + shift, n + shift), rel_tol=1e-12)
    assert not math.isclose(score(3, 1), score(1, 3), rel_tol=1e-6)  # direction matters


def _model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig.preset("tiny", 40, max_len=32, dropout=0.0, positional="rotary")
    return Transformer(config).to(F64).eval()


def test_a_rotary_transformer_is_registered_and_sees_the_order():
    assert POSITIONAL_ENCODINGS.get("rotary") is RotaryPositions
    assert isinstance(positional_encoding("rotary", 64, 32), RotaryPositions)
    model = _model()
    src = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        out = model.encode(src)
        swapped = model.encode(src[:, [1, 0, 2, 3, 4]])
    # The embeddings carry no positions, the attention does: a swap changes every output.
    assert not torch.allclose(out[0, 2:], swapped[0, 2:])
    with pytest.raises(BookError) as refused:
        Transformer(TransformerConfig.preset("tiny", 40, d_model=12, num_heads=4,
                                             positional="rotary"))
    assert str(refused.value).startswith("config: expected heads of an even width")


def test_cached_decoding_gives_the_logits_of_the_whole_prefix():
    """The cached keys are rotated at their own positions and each new query at its own."""
    model = _model(2)
    src = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 0]])
    tgt = torch.randint(4, 40, (2, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        memory = model.encode(src)
        whole = model.decode(tgt, memory, src)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, :2], memory, src, cache=cache)]  # two tokens, then one
        steps += [model.decode(tgt[:, t:t + 1], memory, src, cache=cache) for t in range(2, 6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, rtol=0, atol=1e-10)
    for cache in ("growing", "static", "none"):
        assert greedy_decode(model, src, 0.0, 8, cache=cache) == greedy_decode(model, src, 0.0, 8)
        assert beam_search(model, src, 3, 0.6, 0.0, 8, cache=cache) == \
            beam_search(model, src, 3, 0.6, 0.0, 8)


def test_rotary_end_to_end_through_the_command_line(multi30k_dir, tmp_path, capsys):
    config = tmp_path / "rotary.toml"
    config.write_text(f"""
[model]
preset = "tiny"
max_len = 64
positional = "rotary"

[data]
vocab_size = 300
max_tokens = 128
train_subset = 64
max_len = 32
data_dir = "{multi30k_dir}"

[train]
max_steps = 10
warmup_steps = 5
eval_every = 10
checkpoint_every = 10
precision = "fp32"

[decode]
beam_size = 2
max_len_a = 0.5
max_len_b = 4
""", encoding="utf-8")
    run, results = tmp_path / "run", tmp_path / "results"
    assert main(["train", "--config", str(config), "--out", str(run), "--results",
                 str(results), "--quiet", "--bleu-sentences", "4", "--val-sentences", "16"]) == 0
    capsys.readouterr()
    assert main(["translate", "Ein Hund rennt.", "--checkpoint", str(run), "--quiet"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert main(["evaluate", "--checkpoint", str(run), "--limit", "4", "--results",
                 str(results), "--quiet"]) == 0
    capsys.readouterr()
    (record,) = results.glob("evaluate-*.json")
    assert '"positional": "rotary"' in record.read_text()
    assert main(["export", "--checkpoint", str(run), "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "positional" in err and "'sinusoidal'" in err and len(err.strip().splitlines()) == 1
