"""The course's diagrams: each renders to a PNG with its alt text, reads its labels from its
arguments (Figure 1 from the model instance) and refuses bad arguments by name."""

from __future__ import annotations

import pytest
from IPython.core.formatters import PNGFormatter

from transformer_book.course.figures import BookFigure
from transformer_book.course.figures import diagrams as D
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.util.validation import BookError

JUPYTER_PNG = PNGFormatter()  # what a notebook calls to show a cell's figure


def texts(fig):
    return " ".join(t.get_text() for ax in fig.axes for t in ax.texts)


def check_rendered(fig):
    assert isinstance(fig, BookFigure)
    png = JUPYTER_PNG(fig)
    assert png.startswith(b"\x89PNG")
    assert fig.alt_text.endswith(".") and len(fig.alt_text.split()) >= 8
    assert fig.alt_text.encode("latin-1", "replace")[:20] in png, "alt text in PNG metadata"
    assert fig.get_size_inches()[0] <= 7.0, "fits the book's code column"
    sizes = [t.get_fontsize() for ax in fig.axes for t in ax.texts]
    assert min(sizes) >= 8


def model(**overrides):
    return Transformer(TransformerConfig.preset("tiny", vocab_size=50, **overrides))


def test_transformer_figure_reads_its_labels_from_the_model():
    small = D.transformer_figure(model())
    check_rendered(small)
    words = texts(small)
    assert "N = 2" in words and "d_model = 64" in words and "h = 4, d_k = 16" in words
    assert "d_ff = 128" in words and "Add & Norm" in words and "post-LN" in words
    assert "64 → V = 50" in words and "N = 2" in small.alt_text
    big = D.transformer_figure(model(num_encoder_layers=6, num_decoder_layers=3, d_model=96,
                                     num_heads=6, d_ff=200, norm_first=True))
    check_rendered(big)
    words = texts(big)
    assert "N = 6" in words and "N = 3" in words and "N = 2" not in words
    assert "d_model = 96" in words and "h = 6, d_k = 16" in words and "d_ff = 200" in words
    assert "pre-LN" in words and "Add & Norm" not in words and "LayerNorm (final)" in words
    post_with_final = texts(D.transformer_figure(model(final_norm=True)))
    assert "LayerNorm (final)" in post_with_final
    assert "LayerNorm (final)" not in texts(small)


def test_transformer_figure_refuses_what_is_not_a_transformer():
    with pytest.raises(BookError, match="model: expected a transformer_book Transformer"):
        D.transformer_figure(TransformerConfig.preset("tiny", vocab_size=50))


def test_qkv_figure_prints_the_softmax_weights_it_computes():
    fig = D.qkv_figure(("The", "dog", "is", "eating"))
    check_rendered(fig)
    (ax,) = fig.axes
    weights = [float(t.get_text()) for t in ax.texts if t.get_text().startswith(".")
               or t.get_text() in {"1.00", "0.00"}]
    assert len(weights) == 16
    rows = [sum(weights[i:i + 4]) for i in range(0, 16, 4)]
    assert rows == pytest.approx([1.0] * 4, abs=0.03), "each row of A sums to 1"
    assert "eating" in texts(fig) and "eating" in fig.alt_text
    other = D.qkv_figure(("a", "b", "c"), seed=1)
    assert other.alt_text != fig.alt_text and len(other.axes[0].patches) < len(ax.patches)


def test_mask_figure_draws_the_package_masks():
    fig = D.mask_figure((5, 3), causal_size=4)
    check_rendered(fig)
    marks = [t.get_text() for t in fig.axes[0].texts if t.get_text() in {"T", "F"}]
    # padding mask 2 x 5 (8 True), s2 broadcast 5 x 5 (15 True), causal 4 x 4 (10 True)
    assert len(marks) == 10 + 25 + 16 and marks.count("T") == 8 + 15 + 10
    assert "(2, 1, 1, 5)" in texts(fig) and "(2, 1, 1, 5)" in fig.alt_text


def test_multi_head_figure_splits_d_model_into_heads():
    fig = D.multi_head_figure(d_model=12, heads=3)
    check_rendered(fig)
    words = texts(fig)
    assert "12 = h × d_k = 3 × 4" in words and "head 3 (columns 9–12)" in words
    assert "head 4" not in words


def test_cross_recurrence_cache_figures_follow_their_arguments():
    cross = D.cross_attention_figure(("Le", "chien"), ("The", "dog", "runs"))
    check_rendered(cross)
    assert "(T, S) = (3, 2)" in texts(cross) and "chien" in cross.alt_text
    chain = D.recurrence_vs_attention_figure(n=4)
    check_rendered(chain)
    assert "16 pairs" in texts(chain) and "3 steps" in texts(chain)
    cache = D.kv_cache_figure(steps=3)
    check_rendered(cache)
    assert "computes 1, reads 2" in texts(cache) and "3 with the cache, 6 without" in texts(cache)


def beam_tree():
    node = D.BeamNode
    return node("<bos>", 0.0, "kept", (
        node("The", -0.4, "kept", (
            node("dog", -0.9, "kept"),
            node("<eos>", -2.1, "finished", score=-1.75),
            node("cat", -2.5, "dropped"))),
        node("A", -1.2, "kept")))


def test_beam_tree_figure_draws_each_node_once():
    fig = D.beam_tree_figure(beam_tree())
    check_rendered(fig)
    words = texts(fig)
    for label in ("<bos>\n0.00", "The\n-0.40", "dog\n-0.90", "<eos>\n-2.10", "cat\n-2.50",
                  "A\n-1.20", "score\n-1.75"):
        assert label in words
    assert "4 kept prefixes, 1 finished" in fig.alt_text and "1 dropped" in fig.alt_text


@pytest.mark.parametrize(("call", "message"), [
    (lambda: D.qkv_figure("The dog"), "tokens: expected a sequence of token strings"),
    (lambda: D.qkv_figure(()), "tokens: expected 1 to 6 tokens"),
    (lambda: D.qkv_figure(("a", "")), "tokens: expected non-empty strings"),
    (lambda: D.qkv_figure(seed=-1), "seed: expected an int >= 0"),
    (lambda: D.mask_figure((5, 0)), r"lengths: expected an int in \[1, 8\]"),
    (lambda: D.mask_figure((5, 3), causal_size=2.0), "causal_size: expected an int"),
    (lambda: D.mask_figure(5), "lengths: expected 1 to 5 sentence lengths"),
    (lambda: D.multi_head_figure(d_model=8, heads=3), "d_model: expected a multiple of heads=3"),
    (lambda: D.multi_head_figure(heads=0), r"heads: expected an int in \[1, 4\]"),
    (lambda: D.cross_attention_figure(source=[1, 2]), "source: expected non-empty strings"),
    (lambda: D.cross_attention_figure(target=("x",) * 9), "target: expected 1 to 8 tokens"),
    (lambda: D.recurrence_vs_attention_figure(n=1), r"n: expected an int in \[2, 8\]"),
    (lambda: D.kv_cache_figure(steps=True), "steps: expected an int"),
    (lambda: D.beam_tree_figure("tree"), "tree: expected a BeamNode"),
    (lambda: D.beam_tree_figure(D.BeamNode("<bos>", 0.0, "maybe")),
     "tree.status: expected one of"),
    (lambda: D.beam_tree_figure(D.BeamNode("<bos>", 0.0, "kept", (
        D.BeamNode("<eos>", -1.0, "finished"),))), r"tree.children\[0\].score: expected"),
    (lambda: D.beam_tree_figure(D.BeamNode("<bos>", 0.5)), "tree.log_prob: expected"),
    (lambda: D.beam_tree_figure(D.BeamNode("<bos>", 0.0, "kept", (
        D.BeamNode("x", -1.0, "dropped", (D.BeamNode("y", -2.0),)),))),
     r"tree.children\[0\].children: expected none for a dropped hypothesis"),
])
def test_bad_arguments_are_refused_by_name(call, message):
    with pytest.raises(BookError, match=message):
        call()
