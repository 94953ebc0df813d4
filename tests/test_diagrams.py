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


# --------------------------------------------------------------------------- chapter diagrams


def test_path_length_cones_reach_the_first_input_only_at_the_measured_depth():
    from transformer_book.course.figures.chapter_diagrams import _cone

    def reached(layers):
        return {source for source, _ in _cone(8, layers)[-1]}

    dilated = [(2, 2 ** i) for i in range(3)]  # ByteNet: dilations 1, 2, 4
    assert reached(dilated) == set(range(8)), "3 dilated layers see every input"
    assert 0 not in reached(dilated[:2]), "2 do not reach the first"
    assert 0 in reached([(3, 1)] * 4) and 0 not in reached([(3, 1)] * 3), "ConvS2S, k = 3"


def test_path_length_figure_measures_its_layer_counts():
    from transformer_book.baselines.conv import path_length_convs2s, path_length_dilated

    fig = D.path_length_figure(n=8, kernel_size=3)
    check_rendered(fig)
    words = texts(fig)
    # measured from gradients on the package's stacks; the closed forms must agree
    assert f"{path_length_dilated(8, 2, 2)} layers (log₂ 8" in words
    assert f"{path_length_convs2s(8, 3)} layers" in words
    assert "7 sequential steps" in words and "1 layer" in words
    wider = D.path_length_figure(n=12, kernel_size=5)
    assert f"{path_length_convs2s(12, 5)} layers" in texts(wider)
    assert "11 sequential steps" in wider.alt_text


def test_weighted_average_figure_prints_the_average_it_computes():
    fig = D.weighted_average_figure((0.2, 0.5, 0.3), ("A", "B", "C"), size=3, seed=1)
    check_rendered(fig)
    assert "Output = 0.2·A + 0.5·B + 0.3·C" in texts(fig) and "towards B" in fig.alt_text
    numbers = [float(t.get_text().replace("−", "-")) for t in fig.axes[0].texts
               if t.get_text().replace("−", "-").replace(".", "").lstrip("-").isdigit()]
    a, b, c, out = (numbers[i:i + 3] for i in range(0, 12, 3))
    expected = [0.2 * x + 0.5 * y + 0.3 * z for x, y, z in zip(a, b, c, strict=True)]
    assert out == pytest.approx(expected, abs=0.006)


def test_training_pipeline_figure_draws_real_batches_and_targets(multi30k_dir):
    from transformer_book.data.batching import TokenBudgetSampler
    from transformer_book.data.multi30k import load_multi30k
    from transformer_book.data.tokenizer import BPETokenizer

    pairs = load_multi30k("val", data_dir=multi30k_dir)[:10]
    tokenizer = BPETokenizer.train([s for p in pairs for s in p], vocab_size=300)
    fig = D.training_pipeline_figure(pairs, tokenizer, max_tokens=120, smoothing=0.2,
                                     model=Transformer(TransformerConfig.preset(
                                         "tiny", vocab_size=300)))
    check_rendered(fig)
    src = [len(tokenizer.encode(s, add_eos=True)) for s, _ in pairs]
    tgt = [len(tokenizer.encode(t, add_eos=True)) for _, t in pairs]
    batches = TokenBudgetSampler(src, 120, tgt_lengths=tgt, shuffle=False).batches()
    words = texts(fig)
    assert f"{len(batches)} batches" in words and f"{len(batches)} batches" in fig.alt_text
    first = batches[0]
    assert f"{len(first)} × {max(src[i] for i in first)} = " in words
    assert f"{1 - 0.2 + 0.2 / 300:.3f} on the right token" in words
    assert "N = 2, d_model = 64, h = 4" in words and "V = 300" in words
    assert pairs[0][1][:20] in words


def test_book_loop_positions_parallel_and_knobs_figures_read_their_inputs():
    loop = D.book_loop_figure()
    check_rendered(loop)
    assert "13 Ablations" in texts(loop) and "14 chapters in 3 parts" in loop.alt_text
    positions = D.positions_figure(("dog", "bites", "man"))
    check_rendered(positions)
    assert "max |Δ| < 1e-12" in texts(positions), "without positions: equivariant"
    moved = float(positions.alt_text.split("differ by up to ")[1].rstrip("."))
    assert moved > 0.05, "with positions, the moved token's output changes"
    lengths = [3, 5, 4, 9, 7, 2, 8, 6, 5, 4, 3, 7]
    ddp = D.data_parallel_figure(lengths, max_tokens=16, world_size=3)
    check_rendered(ddp)
    from transformer_book.data.batching import TokenBudgetSampler

    shares = [len(TokenBudgetSampler(lengths, 16, num_replicas=3, rank=r)) for r in range(3)]
    assert all(f"rank {r}\n{n} batches" in texts(ddp) for r, n in enumerate(shares))
    assert "--nproc_per_node=3" in texts(ddp)
    config = TransformerConfig.preset("tiny", vocab_size=50, num_heads=2, dropout=0.3,
                                      label_smoothing=0.05, positional="learned")
    knobs = D.table3_knobs_figure(config)
    check_rendered(knobs)
    words = texts(knobs)
    assert "h = 2" in words and f"d_k = {config.d_k}" in words and "P_drop = 0.3" in words
    assert "ε_ls = 0.05" in words and "positions: learned" in words


def test_beam_tree_is_built_from_a_real_beam_search():
    import torch

    from transformer_book.inference.beam import BeamTrace, beam_search

    torch.manual_seed(0)
    small = model(dropout=0.0).eval()
    trace = BeamTrace()
    beam_search(small, torch.tensor([[5, 6, 7]]), beam_size=2, max_len_a=0,
                          max_len_b=4, trace=trace)
    tree = D.beam_tree(trace, lambda i: f"t{i}")
    fig = D.beam_tree_figure(tree)
    check_rendered(fig)
    first_step = trace.steps[0][0]
    assert [child.token for child in tree.children] == [f"t{c.token}" for c in first_step]
    assert [child.log_prob for child in tree.children] == [c.log_prob for c in first_step]
    kept = sum(c.status == "kept" for step in trace.steps[0] for c in step)
    assert f"{kept + 1} kept prefixes" in fig.alt_text, "every kept candidate and the root"
    short = D.beam_tree(trace, lambda i: f"t{i}", max_steps=2)
    assert all(not grandchild.children for child in short.children
               for grandchild in child.children)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: D.path_length_figure(n=2), r"n: expected an int in \[3, 12\]"),
    (lambda: D.path_length_figure(kernel_size=1), r"kernel_size: expected an int in \[2, 5\]"),
    (lambda: D.weighted_average_figure((0.5, 0.6, 0.1)), "weights: expected numbers that sum"),
    (lambda: D.weighted_average_figure((0.5, 0.5)), "weights: expected 3 numbers"),
    (lambda: D.weighted_average_figure((1.5, -0.5), ("A", "B")), r"weights: expected numbers in"),
    (lambda: D.training_pipeline_figure([("a", "b")] * 3, "tokenizer"),
     "tokenizer: expected a BPETokenizer"),
    (lambda: D.book_loop_figure("map"), "chapters: expected 1 to 4"),
    (lambda: D.positions_figure(("dog", "dog")), "tokens: expected 2 or more distinct"),
    (lambda: D.positions_figure(size=3), "size: expected an even size"),
    (lambda: D.data_parallel_figure([3, 4], 8, world_size=4), "lengths: expected at least 4"),
    (lambda: D.data_parallel_figure([3] * 8, 8, world_size=1), r"world_size: expected an int"),
    (lambda: D.table3_knobs_figure(model()), "config: expected a TransformerConfig"),
    (lambda: D.beam_tree([], str), "trace: expected a BeamTrace filled by beam_search"),
])
def test_chapter_diagrams_refuse_bad_arguments_by_name(call, message):
    with pytest.raises(BookError, match=message):
        call()


def test_training_pipeline_figure_refuses_a_budget_below_the_longest_sentence():
    from transformer_book.data.tokenizer import BPETokenizer

    pairs = [("ein Hund", "a dog"), ("eine Katze läuft", "a cat runs")]
    tokenizer = BPETokenizer.train([s for p in pairs for s in p], vocab_size=270)
    with pytest.raises(BookError, match="max_tokens: expected an int >= the longest"):
        D.training_pipeline_figure(pairs, tokenizer, max_tokens=2)
    with pytest.raises(BookError, match=r"smoothing: expected a number in \[0, 1\)"):
        D.training_pipeline_figure(pairs, tokenizer, smoothing=1.0)
