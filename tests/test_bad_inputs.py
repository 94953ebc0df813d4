"""The catalogue of bad inputs: every public entry point refuses what it cannot use.

Each case is one (entry point, argument, bad value), and its id reads that way. A refusal
through the Python API is a :class:`~transformer_book.util.validation.BookError` whose
message names the argument (or the file and TOML section); through the command line it is
exit status 2 and exactly one line on stderr, ``transformer-book <cmd>: error: ...``,
naming the option. The groups, one parametrized test each:

- configs and TOML files (``TransformerConfig``, ``RunConfig``, ``load_run_config``);
- data and tokenizer (Multi30k, BPE, word vocabularies, padding, token budgets, toy tasks);
- nn modules and attention functions (scores, masks, attention, layers, positions, the model);
- decoding and translation (greedy, beam search, length limits, ``translate``, BLEU);
- checkpoints and runs (saving, loading, ``checkpoint.json``'s content, averaging);
- training entry points (``train``, the objective, the schedule, the corpus checks);
- figures (``course.figures``);
- exercises and the course (checkers, assignments, the course cache, util helpers);
- the command line (``env``, ``assignments``, ``train``, ``translate``, ``evaluate``).

Everything is tiny: an untrained model of width 16 for the API, and one run of a few
steps, trained once for the module, for the cases that need a checkpoint on disk.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import transformer_book.course.figures.attention
import transformer_book.course.figures.model
import transformer_book.course.figures.positional
import transformer_book.course.figures.scaling
import transformer_book.course.figures.selfattention
import transformer_book.course.figures.training  # noqa: F401 (figures.<topic> below)
from transformer_book.baselines.rnn import RNN
from transformer_book.cli import main
from transformer_book.course import cache as course_cache
from transformer_book.course import figures
from transformer_book.course.assignments import make_assignments, strip_solution
from transformer_book.course.exercises.core import check, run_check
from transformer_book.course.figures import as_array
from transformer_book.course.figures.training import lr_schedules, moving_average
from transformer_book.data.batching import (
    TokenBudgetSampler,
    collate_pairs,
    pad_sequences,
    padding_fraction,
    token_mask,
)
from transformer_book.data.multi30k import load_multi30k, multi30k_path
from transformer_book.data.tokenizer import BPETokenizer
from transformer_book.data.toy import make_toy_task
from transformer_book.data.vocabulary import WordVocabulary
from transformer_book.inference.averaging import average_checkpoints
from transformer_book.inference.beam import Beam, beam_search, score_hypothesis
from transformer_book.inference.decoding import Sampling
from transformer_book.inference.greedy import greedy_decode
from transformer_book.inference.lengths import output_length_limits
from transformer_book.inference.scoring import score_corpus
from transformer_book.inference.significance import bootstrap_interval, compare_systems
from transformer_book.inference.trained import TrainedModel, load_trained, resolve_checkpoint
from transformer_book.inference.translate import encode_sources, translate, translate_ids
from transformer_book.nn.attention import (
    AdditiveScore,
    MultiHeadAttention,
    causal_mask,
    dot_score,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
)
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.layers import FeedForward
from transformer_book.nn.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_encoding,
)
from transformer_book.nn.transformer import Transformer
from transformer_book.run.checkpoint import (
    checkpoint_name,
    load_checkpoint,
    load_weights,
    prune_checkpoints,
    save_checkpoint,
)
from transformer_book.run.config import RunConfig, load_run_config
from transformer_book.train.corpus import check_ids
from transformer_book.train.loop import train
from transformer_book.train.objective import (
    count_tokens,
    label_smoothed_cross_entropy,
    make_optimizer,
    noam_lr,
    smoothed_target_distribution,
)
from transformer_book.util.env import get_device, set_seed
from transformer_book.util.files import atomic_write_json, sha256_file
from transformer_book.util.records import write_record
from transformer_book.util.rng import restore_rng_state
from transformer_book.util.timing import measure
from transformer_book.util.validation import BookError

NAN = float("nan")
INF = float("inf")


@dataclass(frozen=True)
class Case:
    """One bad input: ``call(env)`` must be refused with a message containing ``names``."""

    id: str
    call: Callable[[SimpleNamespace], Any]
    names: str


def _ids(cases: list[Case]) -> list[str]:
    assert len({c.id for c in cases}) == len(cases), "case ids must be distinct"
    return [c.id for c in cases]


def _refused(case: Case, env: SimpleNamespace) -> None:
    with pytest.raises(BookError) as refused:
        case.call(env)
    assert case.names in str(refused.value), f"the message does not name {case.names!r}"


# --------------------------------------------------------------------------- fixtures

SENTENCES = [
    "Ein Mann fährt Fahrrad.", "A man rides a bike.", "Zwei Hunde spielen im Schnee.",
    "Two dogs play in the snow.", "Eine Frau singt ein Lied.", "A woman sings a song.",
] * 4

TINY_RUN = """
[model]
preset = "tiny"
d_model = 16
d_ff = 32
num_heads = 2
num_encoder_layers = 1
num_decoder_layers = 1
max_len = 128

[data]
vocab_size = 400
max_tokens = 1024
train_subset = 32
max_len = 100
data_dir = "{data_dir}"

[train]
max_steps = 4
warmup_steps = 2
eval_every = 1000
checkpoint_every = 2
keep_last = 3
precision = "fp32"

[decode]
beam_size = 2
max_len_a = 0.0
max_len_b = 3
"""


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """No case reaches the network: a download fails at once, into an empty cache."""

    def refuse(*args, **kwargs):
        raise urllib.error.URLError("offline")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def api(tmp_path_factory) -> SimpleNamespace:
    """An untrained tiny model, a BPE tokenizer of the same vocabulary, and a folder."""
    torch.manual_seed(0)
    tok = BPETokenizer.train(SENTENCES, vocab_size=300, min_frequency=1)
    config = TransformerConfig(vocab_size=tok.vocab_size, d_model=16, num_heads=2,
                               num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                               max_len=32)
    model = Transformer(config).eval()
    run_config = RunConfig()
    trained = TrainedModel(model, tok, config, run_config, 0, [])
    src = torch.tensor([[5, 6, 7, 2]])
    return SimpleNamespace(tok=tok, config=config, model=model, trained=trained, src=src,
                           mha=MultiHeadAttention(16, 2), tmp=tmp_path_factory.mktemp("bad"),
                           vocab=WordVocabulary.build(["a b c", "a b"]))


@pytest.fixture(scope="module")
def run(multi30k_dir, tmp_path_factory) -> SimpleNamespace:
    """One tiny training run (checkpoints at steps 2 and 4), through the command line."""
    root = tmp_path_factory.mktemp("bad-run")
    config = root / "tiny.toml"
    config.write_text(TINY_RUN.format(data_dir=multi30k_dir))
    code = main(["train", "--config", str(config), "--out", str(root / "run"),
                 "--results", str(root / "results"), "--quiet", "--bleu-sentences", "0",
                 "--val-sentences", "8"])
    assert code == 0
    return SimpleNamespace(root=root, toml=config, run=root / "run",
                           step2=root / "run" / "step_00000002",
                           step4=root / "run" / "step_00000004", data=multi30k_dir)


# --------------------------------------------------------------------------- configs / TOML


def _toml(text: str) -> Callable[[SimpleNamespace], Any]:
    """Load ``text`` as a run config file; the refusal must also name the file."""

    def load(env: SimpleNamespace) -> Any:
        path = env.tmp / "case.toml"
        path.write_text(text)
        try:
            return load_run_config(path)
        except BookError as error:
            assert "case.toml" in str(error), f"the message does not name the file: {error}"
            raise

    return load


def _run_config(**sections: dict[str, Any]) -> Callable[[SimpleNamespace], Any]:
    return lambda env: RunConfig.from_dict(sections, source="run.toml")


def _model_config(**fields: Any) -> Callable[[SimpleNamespace], Any]:
    return lambda env: TransformerConfig(**{"vocab_size": 10, "d_model": 8, "num_heads": 2,
                                            **fields})


CONFIG_CASES = [
    # [model]: a preset and TransformerConfig overrides, in a TOML file
    Case("toml / [model] preset / 'huge'", _toml('[model]\npreset = "huge"\n'),
         "[model] preset"),
    Case("toml / [model] d_model / 10 with 4 heads",
         _toml('[model]\npreset = "tiny"\nd_model = 10\n'), "[model] d_model"),
    Case("toml / [model] dropout / 2", _toml('[model]\npreset = "tiny"\ndropout = 2\n'),
         "[model] dropout"),
    Case("toml / [model] dropout / '0.1'", _toml('[model]\npreset = "tiny"\ndropout = "0.1"\n'),
         "[model] dropout"),
    Case("toml / [model] vocab_size / 999", _toml('[model]\npreset = "tiny"\nvocab_size = 999\n'),
         "[model] vocab_size"),
    Case("toml / [model] positional / 'alibi'",
         _toml('[model]\npreset = "tiny"\npositional = "alibi"\n'), "[model] positional"),
    Case("toml / [model] norm_first / 1", _toml('[model]\npreset = "tiny"\nnorm_first = 1\n'),
         "[model] norm_first"),
    Case("toml / [model] num_heads / 0", _toml('[model]\npreset = "tiny"\nnum_heads = 0\n'),
         "[model] num_heads"),
    Case("toml / [model] key / 'width'", _toml('[model]\npreset = "tiny"\nwidth = 64\n'),
         "[model]"),
    Case("toml / [model] label_smoothing / 1.0",
         _toml('[model]\npreset = "tiny"\nlabel_smoothing = 1.0\n'), "[model] label_smoothing"),
    Case("toml / [model] layer_norm_eps / 0",
         _toml('[model]\npreset = "tiny"\nlayer_norm_eps = 0\n'), "[model] layer_norm_eps"),
    Case("toml / [model] max_len / 0", _toml('[model]\npreset = "tiny"\nmax_len = 0\n'),
         "[model] max_len"),
    Case("toml / [model] / a number", _toml('model = 5\n'), "[model]"),
    # [data]
    Case("toml / [data] src / 'xx'", _toml('[data]\nsrc = "xx"\n'), "[data] src"),
    Case("toml / [data] tgt / 'de' as src", _toml('[data]\nsrc = "de"\ntgt = "de"\n'),
         "[data] tgt"),
    Case("toml / [data] vocab_size / 100", _toml('[data]\nvocab_size = 100\n'),
         "[data] vocab_size"),
    Case("toml / [data] vocab_size / '8000'", _toml('[data]\nvocab_size = "8000"\n'),
         "[data] vocab_size"),
    Case("toml / [data] max_tokens / 0", _toml('[data]\nmax_tokens = 0\n'), "[data] max_tokens"),
    Case("toml / [data] max_tokens / 1 (< max_len)", _toml('[data]\nmax_tokens = 1\n'),
         "[data] max_tokens"),
    Case("toml / [data] data_dir / 5", _toml('[data]\ndata_dir = 5\n'), "[data] data_dir"),
    Case("toml / [data] train_subset / 0", _toml('[data]\ntrain_subset = 0\n'),
         "[data] train_subset"),
    Case("toml / [data] max_len / -1", _toml('[data]\nmax_len = -1\n'), "[data] max_len"),
    Case("toml / [data] key / 'lang'", _toml('[data]\nlang = "de"\n'), "[data]"),
    # [train]
    Case("toml / [train] max_steps / 0", _toml('[train]\nmax_steps = 0\n'), "[train] max_steps"),
    Case("toml / [train] max_minutes / -1", _toml('[train]\nmax_minutes = -1\n'),
         "[train] max_minutes"),
    Case("toml / [train] warmup_steps / 0", _toml('[train]\nwarmup_steps = 0\n'),
         "[train] warmup_steps"),
    Case("toml / [train] lr_factor / 0", _toml('[train]\nlr_factor = 0\n'), "[train] lr_factor"),
    Case("toml / [train] lr_factor / nan", _toml('[train]\nlr_factor = nan\n'),
         "[train] lr_factor"),
    Case("toml / [train] lr_factor / 1e45", _toml('[train]\nlr_factor = 1e45\n'),
         "[train] lr_factor"),
    Case("toml / [train] accumulation / 0", _toml('[train]\naccumulation = 0\n'),
         "[train] accumulation"),
    Case("toml / [train] clip_norm / -1", _toml('[train]\nclip_norm = -1.0\n'),
         "[train] clip_norm"),
    Case("toml / [train] eval_every / 0", _toml('[train]\neval_every = 0\n'),
         "[train] eval_every"),
    Case("toml / [train] checkpoint_every / 0", _toml('[train]\ncheckpoint_every = 0\n'),
         "[train] checkpoint_every"),
    Case("toml / [train] keep_last / 0", _toml('[train]\nkeep_last = 0\n'), "[train] keep_last"),
    Case("toml / [train] seed / -1", _toml('[train]\nseed = -1\n'), "[train] seed"),
    Case("toml / [train] precision / 'fp8'", _toml('[train]\nprecision = "fp8"\n'),
         "[train] precision"),
    Case("toml / [train] key / 'learning_rate'", _toml('[train]\nlearning_rate = 0.1\n'),
         "[train]"),
    # [decode]
    Case("toml / [decode] beam_size / 0", _toml('[decode]\nbeam_size = 0\n'),
         "[decode] beam_size"),
    Case("toml / [decode] alpha / -0.5", _toml('[decode]\nalpha = -0.5\n'), "[decode] alpha"),
    Case("toml / [decode] alpha / 1000", _toml('[decode]\nalpha = 1000\n'), "[decode] alpha"),
    Case("toml / [decode] alpha / inf", _toml('[decode]\nalpha = inf\n'), "[decode] alpha"),
    Case("toml / [decode] max_len_a / -1", _toml('[decode]\nmax_len_a = -1.0\n'),
         "[decode] max_len_a"),
    Case("toml / [decode] max_len_b / -10", _toml('[decode]\nmax_len_b = -10\n'),
         "[decode] max_len_b"),
    Case("toml / [decode] max_len_b / 1.5", _toml('[decode]\nmax_len_b = 1.5\n'),
         "[decode] max_len_b"),
    # the file itself
    Case("toml / section / [beam]", _toml('[beam]\nsize = 4\n'), "unknown sections ['beam']"),
    Case("toml / path / not valid TOML", _toml('[model\npreset = "tiny"\n'), "path"),
    Case("load_run_config / path / a missing file",
         lambda env: load_run_config(env.tmp / "missing.toml"), "path"),
    # RunConfig and TransformerConfig in Python
    Case("RunConfig.from_dict / d / a list", lambda env: RunConfig.from_dict([1]), "RunConfig"),
    Case("RunConfig.from_dict / [train] / a number", _run_config(train=3), "run.toml [train]"),
    Case("RunConfig.from_dict / [decode] beam_size / True", _run_config(decode={"beam_size": True}),
         "run.toml [decode] beam_size"),
    Case("TransformerConfig / vocab_size / 0", _model_config(vocab_size=0), "vocab_size"),
    Case("TransformerConfig / d_model / 30 with 4 heads",
         _model_config(d_model=30, num_heads=4), "d_model"),
    Case("TransformerConfig / eos_id / 2 with vocab_size 2", _model_config(vocab_size=2),
         "eos_id"),
    Case("TransformerConfig / pad_id / 1 as bos_id", _model_config(pad_id=1),
         "pad_id/bos_id/eos_id"),
    Case("TransformerConfig / dropout / -0.1", _model_config(dropout=-0.1), "dropout"),
    Case("TransformerConfig / attention_dropout / 1.0", _model_config(attention_dropout=1.0),
         "attention_dropout"),
    Case("TransformerConfig / positional / 'rope'", _model_config(positional="rope"),
         "positional"),
    Case("TransformerConfig / layer_norm_eps / nan", _model_config(layer_norm_eps=NAN),
         "layer_norm_eps"),
    Case("TransformerConfig / tie_embeddings / 'yes'", _model_config(tie_embeddings="yes"),
         "tie_embeddings"),
    Case("TransformerConfig.preset / name / 'medium'",
         lambda env: TransformerConfig.preset("medium", 100), "name"),
    Case("TransformerConfig.preset / overrides / 'heads'",
         lambda env: TransformerConfig.preset("tiny", 100, heads=2), "overrides"),
    Case("TransformerConfig.from_dict / d / a list",
         lambda env: TransformerConfig.from_dict([1]), "d"),
    Case("TransformerConfig.from_dict / d / key 'width'",
         lambda env: TransformerConfig.from_dict({"vocab_size": 10, "width": 3}), "width"),
    Case("TransformerConfig.replace / changes / key 'foo'",
         lambda env: env.config.replace(foo=1), "changes"),
    Case("TransformerConfig.replace / d_model / 7", lambda env: env.config.replace(d_model=7),
         "d_model"),
]


@pytest.mark.parametrize("case", CONFIG_CASES, ids=_ids(CONFIG_CASES))
def test_configs_refuse(case, api):
    _refused(case, api)


# --------------------------------------------------------------------------- data & tokenizer


def _corrupt_copy(env: SimpleNamespace) -> Path:
    """A folder whose ``val.de.gz`` is not the real file."""
    folder = env.tmp / "corrupt-multi30k"
    folder.mkdir(exist_ok=True)
    (folder / "val.de.gz").write_bytes(b"not the real file")
    return folder


def _not_a_tokenizer(env: SimpleNamespace) -> Path:
    path = env.tmp / "not-a-tokenizer.json"
    path.write_text("{not json")
    return path


LONG = torch.long
DATA_CASES = [
    # Multi30k
    Case("load_multi30k / split / 'dev'", lambda env: load_multi30k("dev"), "split"),
    Case("load_multi30k / src / 'xx'", lambda env: load_multi30k("val", src="xx"), "src"),
    Case("load_multi30k / tgt / 'xx'", lambda env: load_multi30k("val", tgt="xx"), "tgt"),
    Case("load_multi30k / tgt / 'de' as src", lambda env: load_multi30k("val", "de", "de"),
         "tgt"),
    Case("load_multi30k / data_dir / a missing folder",
         lambda env: load_multi30k("val", data_dir=env.tmp / "no-such-folder"),
         "no-such-folder"),
    Case("multi30k_path / lang / 'cz'", lambda env: multi30k_path("val", "cz"), "lang"),
    Case("multi30k_path / data_dir / a missing folder",
         lambda env: multi30k_path("val", "de", env.tmp / "no-such-folder"), "no-such-folder"),
    Case("multi30k_path / data_dir / a file",
         lambda env: multi30k_path("val", "de", _not_a_tokenizer(env)), "data_dir"),
    Case("multi30k_path / data_dir / a corrupt val.de.gz",
         lambda env: multi30k_path("val", "de", _corrupt_copy(env)), "val.de.gz"),
    # BPE
    Case("BPETokenizer.train / texts / []", lambda env: BPETokenizer.train([], 300), "texts"),
    Case("BPETokenizer.train / texts / [1, 2]", lambda env: BPETokenizer.train([1, 2], 300),
         "texts"),
    Case("BPETokenizer.train / texts / ['', '']", lambda env: BPETokenizer.train(["", ""], 300),
         "texts"),
    Case("BPETokenizer.train / vocab_size / 100",
         lambda env: BPETokenizer.train(SENTENCES, 100), "vocab_size"),
    Case("BPETokenizer.train / min_frequency / 0",
         lambda env: BPETokenizer.train(SENTENCES, 300, min_frequency=0), "min_frequency"),
    Case("BPETokenizer.train / texts / a lone surrogate",
         lambda env: BPETokenizer.train(["ein \ud800 Mann"], 300), "texts"),
    Case("BPETokenizer.load / path / a missing file",
         lambda env: BPETokenizer.load(env.tmp / "missing.json"), "path"),
    Case("BPETokenizer.load / path / not JSON",
         lambda env: BPETokenizer.load(_not_a_tokenizer(env)), "path"),
    Case("BPETokenizer / tokenizer / an object", lambda env: BPETokenizer(object()), "tokenizer"),
    Case("BPETokenizer.encode / text / 5", lambda env: env.tok.encode(5), "text"),
    Case("BPETokenizer.encode / text / a lone surrogate",
         lambda env: env.tok.encode("ein \ud800 Mann"), "text"),
    Case("BPETokenizer.encode_batch / texts / a string",
         lambda env: env.tok.encode_batch("abc"), "texts"),
    Case("BPETokenizer.encode_batch / texts / a lone surrogate",
         lambda env: env.tok.encode_batch(["gut", "\udcff"]), "texts"),
    Case("BPETokenizer.decode / ids / 99999", lambda env: env.tok.decode([99999]), "ids"),
    Case("BPETokenizer.decode / ids / -1", lambda env: env.tok.decode([-1]), "ids"),
    Case("BPETokenizer.decode / ids / a 2-D tensor",
         lambda env: env.tok.decode(torch.zeros(2, 2, dtype=LONG)), "ids"),
    Case("BPETokenizer.decode / ids / a float tensor",
         lambda env: env.tok.decode(torch.tensor([1.0])), "ids"),
    Case("BPETokenizer.decode_batch / batch / id 99999",
         lambda env: env.tok.decode_batch([[1, 99999]]), "batch"),
    Case("BPETokenizer.id_to_token / token_id / -5", lambda env: env.tok.id_to_token(-5),
         "token_id"),
    # word vocabularies
    Case("WordVocabulary.build / texts / []", lambda env: WordVocabulary.build([]), "texts"),
    Case("WordVocabulary.build / min_frequency / 0",
         lambda env: WordVocabulary.build(["a b"], min_frequency=0), "min_frequency"),
    Case("WordVocabulary.id_to_token / token_id / 99", lambda env: env.vocab.id_to_token(99),
         "token_id"),
    # padding and batching
    Case("pad_sequences / sequences / []", lambda env: pad_sequences([]), "sequences"),
    Case("pad_sequences / sequences / ['a']", lambda env: pad_sequences([[1, "a"]]),
         "sequences[0]"),
    Case("pad_sequences / length / 2 < 3", lambda env: pad_sequences([[1, 2, 3]], length=2),
         "length"),
    Case("pad_sequences / length / -1", lambda env: pad_sequences([[1]], length=-1), "length"),
    Case("token_mask / ids / a 1-D tensor", lambda env: token_mask(torch.zeros(3, dtype=LONG)),
         "ids"),
    Case("token_mask / ids / a float tensor", lambda env: token_mask(torch.zeros(2, 3)), "ids"),
    Case("collate_pairs / batch / []", lambda env: collate_pairs([]), "batch"),
    Case("collate_pairs / batch / a 1-tuple", lambda env: collate_pairs([([1],)]), "batch[0]"),
    Case("padding_fraction / batches / []", lambda env: padding_fraction([], [1]), "batches"),
    Case("padding_fraction / batches / [[]]", lambda env: padding_fraction([[]], [1]),
         "batches"),
    Case("TokenBudgetSampler / lengths / []", lambda env: TokenBudgetSampler([], 10), "lengths"),
    Case("TokenBudgetSampler / lengths / 0", lambda env: TokenBudgetSampler([0, 3], 10),
         "lengths"),
    Case("TokenBudgetSampler / max_tokens / 4 < longest 5",
         lambda env: TokenBudgetSampler([5], 4), "max_tokens"),
    Case("TokenBudgetSampler / max_tokens / 0", lambda env: TokenBudgetSampler([5], 0),
         "max_tokens"),
    Case("TokenBudgetSampler / tgt_lengths / 2 for 1 example",
         lambda env: TokenBudgetSampler([5], 10, tgt_lengths=[1, 2]), "tgt_lengths"),
    Case("TokenBudgetSampler / rank / 2 of 2",
         lambda env: TokenBudgetSampler([5], 10, num_replicas=2, rank=2), "rank"),
    Case("TokenBudgetSampler / num_replicas / 0",
         lambda env: TokenBudgetSampler([5], 10, num_replicas=0), "num_replicas"),
    # toy tasks
    Case("make_toy_task / name / 'shuffle'", lambda env: make_toy_task("shuffle", 4), "name"),
    Case("make_toy_task / num_examples / 0", lambda env: make_toy_task("copy", 0),
         "num_examples"),
    Case("make_toy_task / min_len / 5 > max_len 3",
         lambda env: make_toy_task("copy", 4, min_len=5, max_len=3), "min_len"),
    Case("make_toy_task / vocab_size / 4", lambda env: make_toy_task("copy", 4, vocab_size=4),
         "vocab_size"),
]


@pytest.mark.parametrize("case", DATA_CASES, ids=_ids(DATA_CASES))
def test_data_and_tokenizer_refuse(case, api):
    _refused(case, api)


# --------------------------------------------------------------------------- nn modules


def _t(*shape: int, dtype: torch.dtype = torch.float32, fill: float | None = None
       ) -> torch.Tensor:
    x = torch.randn(*shape).to(dtype)
    if fill is not None:
        x.view(-1)[0] = fill
    return x


Q, K, V = (1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)
NN_CASES = [
    # scores
    Case("dot_score / q / a list", lambda env: dot_score([1.0], _t(3, 4)), "q"),
    Case("dot_score / q / an int tensor", lambda env: dot_score(_t(3, 4, dtype=LONG), _t(3, 4)),
         "q"),
    Case("dot_score / q / 1-D", lambda env: dot_score(_t(4), _t(3, 4)), "q"),
    Case("dot_score / k / d_k 5 for 4", lambda env: dot_score(_t(2, 3, 4), _t(2, 3, 5)), "k"),
    Case("dot_score / k / batch 3 for 2", lambda env: dot_score(_t(2, 3, 4), _t(3, 3, 4)), "k"),
    Case("AdditiveScore / q_dim / 0", lambda env: AdditiveScore(0, 4, 4), "q_dim"),
    Case("AdditiveScore / hidden / 0", lambda env: AdditiveScore(4, 4, 0), "hidden"),
    Case("AdditiveScore.forward / q / width 5 for 4",
         lambda env: AdditiveScore(4, 4, 4)(_t(2, 5), _t(3, 4)), "q"),
    # masks and masked_softmax
    Case("masked_softmax / scores / a list", lambda env: masked_softmax([1.0, 2.0], None),
         "scores"),
    Case("masked_softmax / scores / an int tensor",
         lambda env: masked_softmax(torch.ones(2, 3, dtype=LONG), None), "scores"),
    Case("masked_softmax / mask / a float tensor",
         lambda env: masked_softmax(_t(2, 3), torch.ones(2, 3)), "mask"),
    Case("masked_softmax / mask / shape (2, 4) for (2, 3)",
         lambda env: masked_softmax(_t(2, 3), torch.ones(2, 4, dtype=torch.bool)), "mask"),
    Case("masked_softmax / scores / NaN", lambda env: masked_softmax(_t(2, 3, fill=NAN), None),
         "scores"),
    Case("padding_mask / ids / 1-D", lambda env: padding_mask(torch.zeros(3, dtype=LONG), 0),
         "ids"),
    Case("padding_mask / ids / a float tensor", lambda env: padding_mask(_t(2, 3), 0), "ids"),
    Case("padding_mask / pad_id / 0.5",
         lambda env: padding_mask(torch.zeros(2, 3, dtype=LONG), 0.5), "pad_id"),
    Case("causal_mask / length / 0", lambda env: causal_mask(0), "length"),
    Case("causal_mask / length / 2.5", lambda env: causal_mask(2.5), "length"),
    # scaled dot-product attention
    Case("scaled_dot_product_attention / v / L_k 4 for 5",
         lambda env: scaled_dot_product_attention(_t(*Q), _t(*K), _t(1, 2, 4, 4)), "v"),
    Case("scaled_dot_product_attention / dropout_p / 1.0",
         lambda env: scaled_dot_product_attention(_t(*Q), _t(*K), _t(*V), dropout_p=1.0),
         "dropout_p"),
    Case("scaled_dot_product_attention / dropout_p / '0.1'",
         lambda env: scaled_dot_product_attention(_t(*Q), _t(*K), _t(*V), dropout_p="0.1"),
         "dropout_p"),
    Case("scaled_dot_product_attention / mask / an int tensor",
         lambda env: scaled_dot_product_attention(_t(*Q), _t(*K), _t(*V),
                                                  torch.ones(3, 5, dtype=LONG)), "mask"),
    Case("scaled_dot_product_attention / mask / shape (3, 4) for (3, 5)",
         lambda env: scaled_dot_product_attention(_t(*Q), _t(*K), _t(*V),
                                                  torch.ones(3, 4, dtype=torch.bool)), "mask"),
    Case("scaled_dot_product_attention / k / float64 for float32",
         lambda env: scaled_dot_product_attention(_t(*Q), _t(*K, dtype=torch.float64),
                                                  _t(*V)), "k"),
    Case("scaled_dot_product_attention / v / float64 for float32",
         lambda env: scaled_dot_product_attention(_t(*Q), _t(*K),
                                                  _t(*V, dtype=torch.float64)), "v"),
    Case("scaled_dot_product_attention / q / NaN",
         lambda env: scaled_dot_product_attention(_t(*Q, fill=NAN), _t(*K), _t(*V)), "q"),
    Case("scaled_dot_product_attention / k / inf",
         lambda env: scaled_dot_product_attention(_t(*Q), _t(*K, fill=INF), _t(*V)), "k"),
    Case("scaled_dot_product_attention / v / NaN",
         lambda env: scaled_dot_product_attention(_t(*Q), _t(*K), _t(*V, fill=NAN)), "v"),
    # multi-head attention
    Case("MultiHeadAttention / num_heads / 3 for d_model 16",
         lambda env: MultiHeadAttention(16, 3), "num_heads"),
    Case("MultiHeadAttention / d_model / 0", lambda env: MultiHeadAttention(0, 1), "d_model"),
    Case("MultiHeadAttention / dropout / '0.1'",
         lambda env: MultiHeadAttention(16, 2, dropout="0.1"), "dropout"),
    Case("MultiHeadAttention / bias / 1", lambda env: MultiHeadAttention(16, 2, bias=1), "bias"),
    Case("MultiHeadAttention.from_torch / m / a Linear",
         lambda env: MultiHeadAttention.from_torch(torch.nn.Linear(2, 2)), "m"),
    Case("MultiHeadAttention.forward / query / 2-D",
         lambda env: (x := _t(5, 16)) is None or env.mha(x, x, x), "query"),
    Case("MultiHeadAttention.forward / query / width 8 for 16",
         lambda env: (x := _t(1, 5, 8)) is None or env.mha(x, x, x), "query"),
    Case("MultiHeadAttention.forward / value / L 4 for key's 5",
         lambda env: env.mha(_t(1, 3, 16), _t(1, 5, 16), _t(1, 4, 16)), "value"),
    Case("MultiHeadAttention.forward / mask / a float tensor",
         lambda env: (x := _t(1, 5, 16)) is None or env.mha(x, x, x, torch.ones(5, 5)), "mask"),
    Case("MultiHeadAttention.forward / mask / shape (5, 4)",
         lambda env: (x := _t(1, 5, 16)) is None
         or env.mha(x, x, x, torch.ones(5, 4, dtype=torch.bool)), "mask"),
    Case("MultiHeadAttention.forward / query / float64 for float32 weights",
         lambda env: (x := _t(1, 5, 16, dtype=torch.float64)) is None or env.mha(x, x, x),
         "query"),
    # MultiHeadAttention.forward checks metadata only: inside a model a NaN surfaces as a
    # non-finite loss at the training step (tests/test_train_step.py); the attention
    # functions a reader calls directly refuse non-finite values where reading them is free.
    Case("scaled_dot_product_attention / k / NaN",
         lambda env: scaled_dot_product_attention(_t(*Q), _t(*K, fill=NAN), _t(*V)), "k"),
    # layers and positions
    Case("FeedForward / d_ff / 0", lambda env: FeedForward(4, 0), "d_ff"),
    Case("sinusoidal_encoding / length / 0", lambda env: sinusoidal_encoding(0, 16), "length"),
    Case("sinusoidal_encoding / d_model / 15", lambda env: sinusoidal_encoding(4, 15), "d_model"),
    Case("SinusoidalPositionalEncoding / d_model / 15",
         lambda env: SinusoidalPositionalEncoding(15), "d_model"),
    Case("SinusoidalPositionalEncoding.forward / x / 5 positions of 4",
         lambda env: SinusoidalPositionalEncoding(16, max_len=4)(_t(1, 5, 16)), "x"),
    Case("SinusoidalPositionalEncoding.forward / offset / -1",
         lambda env: SinusoidalPositionalEncoding(16)(_t(1, 2, 16), offset=-1), "offset"),
    Case("LearnedPositionalEmbedding / max_len / 0",
         lambda env: LearnedPositionalEmbedding(16, 0), "max_len"),
    Case("LearnedPositionalEmbedding / dropout / 2",
         lambda env: LearnedPositionalEmbedding(16, 8, dropout=2), "dropout"),
    # the model
    Case("Transformer / config / a dict", lambda env: Transformer({"vocab_size": 10}), "config"),
    Case("Transformer / d_model / 9 (odd, sinusoidal)",
         lambda env: Transformer(TransformerConfig(vocab_size=10, d_model=9, num_heads=3)),
         "d_model"),
    Case("Transformer.forward / src_ids / a float tensor",
         lambda env: env.model(_t(1, 3), env.src), "src_ids"),
    Case("Transformer.forward / src_ids / 1-D",
         lambda env: env.model(env.src[0], env.src), "src_ids"),
    Case("Transformer.forward / tgt_ids / batch 2 for 1",
         lambda env: env.model(env.src, env.src.repeat(2, 1)), "tgt_ids"),
    Case("Transformer.forward / src_ids / 40 positions of 32",
         lambda env: env.model(torch.ones(1, 40, dtype=LONG), env.src), "src_ids"),
    Case("Transformer.forward / tgt_ids / shape (1, 0)",
         lambda env: env.model(env.src, torch.ones(1, 0, dtype=LONG)), "tgt_ids"),
    Case("Transformer.check_ids / ids / 99999",
         lambda env: env.model.check_ids(torch.tensor([[99999]]), "ids"), "ids"),
    Case("Transformer.decode / memory / width 8 for 16",
         lambda env: env.model.decode(env.src, _t(1, 4, 8), env.src), "memory"),
]


@pytest.mark.parametrize("case", NN_CASES, ids=_ids(NN_CASES))
def test_nn_modules_and_attention_refuse(case, api):
    _refused(case, api)


# --------------------------------------------------------------------------- decoding


def _greedy(**kwargs: Any) -> Callable[[SimpleNamespace], Any]:
    return lambda env: greedy_decode(env.model, env.src, **{"max_len_b": 2, **kwargs})


def _beam(**kwargs: Any) -> Callable[[SimpleNamespace], Any]:
    return lambda env: beam_search(env.model, env.src, **{"max_len_b": 2, **kwargs})


def _translate_ids(sources: Any = ((5, 6, 7),), **kwargs: Any) -> Callable[[SimpleNamespace], Any]:
    return lambda env: translate_ids(env.model, sources, **{"max_len_b": 2, **kwargs})


def _translate_beam(**settings: Any) -> Callable[[SimpleNamespace], Any]:
    """translate_ids with Beam(**settings), made inside the call (it checks its settings)."""
    return lambda env: translate_ids(env.model, [[5, 6, 7]], Beam(**settings), max_len_b=2)


def _sampling(**settings: Any) -> Callable[[SimpleNamespace], Any]:
    return lambda env: translate_ids(env.model, [[5, 6, 7]], Sampling(**settings), max_len_b=2)


def _translate(sentences: Any = ("Ein Mann.",), **kwargs: Any
               ) -> Callable[[SimpleNamespace], Any]:
    return lambda env: translate(env.trained, sentences, **kwargs)


DECODING_CASES = [
    # greedy decoding
    Case("greedy_decode / model / a Linear",
         lambda env: greedy_decode(torch.nn.Linear(2, 2), env.src), "model"),
    Case("greedy_decode / src_ids / a float tensor",
         lambda env: greedy_decode(env.model, env.src.float()), "src_ids"),
    Case("greedy_decode / src_ids / id 99999",
         lambda env: greedy_decode(env.model, torch.tensor([[5, 99999]])), "src_ids"),
    Case("greedy_decode / src_ids / id -1",
         lambda env: greedy_decode(env.model, torch.tensor([[5, -1]])), "src_ids"),
    Case("greedy_decode / max_len_a / -1", _greedy(max_len_a=-1.0), "max_len_a"),
    Case("greedy_decode / max_len_a / nan", _greedy(max_len_a=NAN), "max_len_a"),
    Case("greedy_decode / max_len_b / -10", _greedy(max_len_b=-10), "max_len_b"),
    Case("greedy_decode / max_len_b / 2.5", _greedy(max_len_b=2.5), "max_len_b"),
    Case("greedy_decode / min_len / -1", _greedy(min_len=-1), "min_len"),
    # beam search
    Case("beam_search / beam_size / 0", _beam(beam_size=0), "beam_size"),
    Case("beam_search / beam_size / wider than the vocabulary", _beam(beam_size=100_000),
         "beam_size"),
    Case("beam_search / alpha / inf", _beam(alpha=INF), "alpha"),
    Case("beam_search / alpha / -1", _beam(alpha=-1.0), "alpha"),
    Case("beam_search / alpha / 1000", _beam(alpha=1000.0), "alpha"),
    Case("beam_search / stop / 'early'", _beam(stop="early"), "stop"),
    Case("beam_search / max_len_b / -10", _beam(max_len_b=-10), "max_len_b"),
    Case("beam_search / min_len / 1.5", _beam(min_len=1.5), "min_len"),
    Case("score_hypothesis / src_ids / 3-D",
         lambda env: score_hypothesis(env.model, env.src[None], [5]), "src_ids"),
    Case("score_hypothesis / alpha / inf",
         lambda env: score_hypothesis(env.model, env.src, [5], alpha=INF), "alpha"),
    Case("output_length_limits / src_ids / 1-D",
         lambda env: output_length_limits(env.src[0], 0, 1.0, 5, 32), "src_ids"),
    Case("output_length_limits / max_positions / 1",
         lambda env: output_length_limits(env.src, 0, 1.0, 5, 1), "max_positions"),
    Case("output_length_limits / pad_id / '0'",
         lambda env: output_length_limits(env.src, "0", 1.0, 5, 32), "pad_id"),
    # translate_ids: lists of BPE ids
    Case("translate_ids / strategy / 'beam'", _translate_ids(strategy="beam"), "strategy"),
    Case("translate_ids / Beam beam_size / 0", _translate_beam(beam_size=0), "beam_size"),
    Case("translate_ids / Beam beam_size / wider than the vocabulary",
         _translate_beam(beam_size=100_000), "beam_size"),
    Case("translate_ids / Beam alpha / inf", _translate_beam(beam_size=2, alpha=INF), "alpha"),
    Case("translate_ids / Beam alpha / -1 with a beam of one",
         _translate_beam(beam_size=1, alpha=-1.0), "alpha"),
    Case("translate_ids / Beam alpha / '0.6'", _translate_beam(alpha="0.6"), "alpha"),
    Case("translate_ids / Beam stop / 'never'", _translate_beam(beam_size=2, stop="never"),
         "stop"),
    Case("translate_ids / Sampling temperature / 0", _sampling(temperature=0), "temperature"),
    Case("translate_ids / Sampling temperature / -1", _sampling(temperature=-1.0),
         "temperature"),
    Case("translate_ids / Sampling temperature / inf", _sampling(temperature=INF),
         "temperature"),
    Case("translate_ids / Sampling top_p / 0", _sampling(top_p=0.0), "top_p"),
    Case("translate_ids / Sampling top_p / 1.5", _sampling(top_p=1.5), "top_p"),
    Case("translate_ids / Sampling top_p / nan", _sampling(top_p=NAN), "top_p"),
    Case("translate_ids / Sampling seed / -1", _sampling(seed=-1), "seed"),
    Case("translate_ids / max_len_a / inf", _translate_ids(max_len_a=INF), "max_len_a"),
    Case("translate_ids / max_len_b / -10", _translate_ids(max_len_b=-10), "max_len_b"),
    Case("translate_ids / max_tokens / 0", _translate_ids(max_tokens=0), "max_tokens"),
    Case("translate_ids / sources / id 99999", _translate_ids([[5, 99999]]), "sources"),
    Case("translate_ids / sources / ['a']", _translate_ids([["a"]]), "sources"),
    Case("translate_ids / device / 'tpu'", _translate_ids(device="tpu"), "device"),
    # translate: sentences, with a model and its tokenizer
    Case("translate / sentences / []", _translate([]), "sentences"),
    Case("translate / sentences / [5]", _translate([5]), "sentences"),
    Case("translate / sentences / a lone surrogate", _translate(["ein \ud800 Mann"]),
         "sentences[0]"),
    Case("translate / sentences / 100 words for 32 positions", _translate(["Mann " * 100]),
         "sentences[0]"),
    Case("translate / alpha / inf", _translate(beam_size=2, alpha=INF), "alpha"),
    Case("translate / beam_size / -1", _translate(beam_size=-1), "beam_size"),
    Case("translate / max_tokens / 0", _translate(max_tokens=0), "max_tokens"),
    Case("translate / stop / 'soon'", _translate(beam_size=2, stop="soon"), "stop"),
    Case("translate / strategy / 'nucleus'", _translate(strategy="nucleus"), "strategy"),
    Case("translate / settings / beam_size for sampling",
         _translate(strategy="sample", beam_size=2), "settings"),
    Case("translate / temperature / 0", _translate(strategy="sample", temperature=0.0),
         "temperature"),
    Case("encode_sources / sentences / a string",
         lambda env: encode_sources(env.tok, "Ein Mann.", 32), "sentences"),
    # BLEU
    Case("score_corpus / references / 2 for 1 hypothesis",
         lambda env: score_corpus(["a"], ["a", "b"]), "references"),
    Case("score_corpus / hypotheses / [1]", lambda env: score_corpus([1], ["a"]), "hypotheses"),
    Case("score_corpus / hypotheses / []", lambda env: score_corpus([], []), "hypotheses"),
    Case("score_corpus / other_metrics / 'yes'",
         lambda env: score_corpus(["a"], ["a"], other_metrics="yes"), "other_metrics"),
    # comparing systems
    Case("compare_systems / system_hyps / 1 for 2 references",
         lambda env: compare_systems(["a", "b"], ["a"], ["a", "b"]), "system_hyps"),
    Case("compare_systems / baseline_hyps / [None]",
         lambda env: compare_systems([None], ["a"], ["a"]), "baseline_hyps"),
    Case("compare_systems / references / []", lambda env: compare_systems([], [], []),
         "references"),
    Case("compare_systems / metric / 'ter'",
         lambda env: compare_systems(["a"], ["a"], ["a"], metric="ter"), "metric"),
    Case("compare_systems / resamples / 99",
         lambda env: compare_systems(["a"], ["a"], ["a"], resamples=99), "resamples"),
    Case("compare_systems / seed / -1",
         lambda env: compare_systems(["a"], ["a"], ["a"], seed=-1), "seed"),
    Case("compare_systems / names / 'ab'",
         lambda env: compare_systems(["a"], ["a"], ["a"], names="ab"), "names"),
    Case("bootstrap_interval / level / 95",
         lambda env: bootstrap_interval(["a"], ["a"], level=95), "level"),
    Case("bootstrap_interval / level / nan",
         lambda env: bootstrap_interval(["a"], ["a"], level=NAN), "level"),
    Case("bootstrap_interval / hypotheses / a string",
         lambda env: bootstrap_interval("a", ["a"]), "hypotheses"),
]


@pytest.mark.parametrize("case", DECODING_CASES, ids=_ids(DECODING_CASES))
def test_decoding_and_translation_refuse(case, api):
    _refused(case, api)


# --------------------------------------------------------------------------- checkpoints


@pytest.fixture(scope="module")
def ckpt(api, run) -> SimpleNamespace:
    """The tiny run and the untrained model together (the checkpoint cases use both)."""
    return SimpleNamespace(**vars(api), **vars(run))


def _copy(env: SimpleNamespace, edit: Callable[[dict[str, Any]], Any] | None = None, *,
          rehash: bool = True, source: str = "step4") -> Path:
    """A copy of a checkpoint of the run, ``checkpoint.json`` edited by ``edit`` (which may
    return a whole new value). With ``rehash``, ``checkpoint.sha256`` (where the format has
    one) is rewritten to match, so the edited content itself must be refused."""
    env.copies = getattr(env, "copies", 0) + 1
    copy = env.tmp / f"copy{env.copies}" / "step_00000004"
    shutil.copytree(getattr(env, source), copy)
    if edit is not None:
        meta_path = copy / "checkpoint.json"
        meta = json.loads(meta_path.read_text())
        changed = edit(meta)
        meta_path.write_text(json.dumps(meta if changed is None else changed))
        stamp = copy / "checkpoint.sha256"
        if rehash and stamp.exists():
            stamp.write_text(f"{sha256_file(meta_path)}  checkpoint.json\n")
    return copy


def _file_edited(name: str, data: bytes) -> Callable[[SimpleNamespace], Path]:
    def make(env: SimpleNamespace) -> Path:
        copy = _copy(env)
        (copy / name).write_bytes(data)
        return copy

    return make


def _loaded(make: Callable[[SimpleNamespace], Path]) -> Callable[[SimpleNamespace], Any]:
    return lambda env: load_trained(make(env))


class _Evil:
    """Unpickling this runs a command: ``torch.load(weights_only=True)`` must refuse it."""

    def __reduce__(self):
        return (os.system, ("echo unpickled",))


def _malicious_optimizer(env: SimpleNamespace) -> Any:
    folder = env.tmp / "evil" / "step_00000000"
    fake = SimpleNamespace(state_dict=lambda: {"state": _Evil(), "param_groups": []})
    save_checkpoint(folder, env.model, config={}, step=0, optimizer=fake)
    optimizer, _ = make_optimizer(env.model, 16, 10)
    return load_checkpoint(folder, env.model, optimizer)


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(meta: dict[str, Any]) -> None:
        meta[key] = value

    return edit


def _outside_key(env: SimpleNamespace) -> Path:
    """``checkpoint.json`` listing a file outside the folder, with that file's true hash."""
    outside = env.tmp / "outside.txt"
    outside.write_text("not part of any checkpoint")

    def edit(meta: dict[str, Any]) -> None:
        meta["sha256"]["../../outside.txt"] = sha256_file(outside)

    return _copy(env, edit)


def _norm_first(meta: dict[str, Any]) -> None:
    meta["config"]["model"]["norm_first"] = True


def _downgraded(env: SimpleNamespace) -> Path:
    """Issue 32: ``checkpoint.sha256`` deleted, ``format_version`` 1, the config edited
    (``layer_norm_eps`` 0.1: the same shapes, other logits)."""
    def edit(meta: dict[str, Any]) -> None:
        meta["format_version"], meta["config"]["model"]["layer_norm_eps"] = 1, 0.1

    copy = _copy(env, edit, rehash=False)
    (copy / "checkpoint.sha256").unlink()
    return copy


def _empty_dir(env: SimpleNamespace, name: str) -> Path:
    folder = env.tmp / name
    folder.mkdir(exist_ok=True)
    return folder


CHECKPOINT_CASES = [
    Case("checkpoint_name / step / -1", lambda env: checkpoint_name(-1), "step"),
    Case("checkpoint_name / step / 1.5", lambda env: checkpoint_name(1.5), "step"),
    Case("save_checkpoint / model / a string",
         lambda env: save_checkpoint(env.tmp / "s1", "model", config={}, step=0), "model"),
    Case("save_checkpoint / step / -1",
         lambda env: save_checkpoint(env.tmp / "s2", env.model, config={}, step=-1), "step"),
    Case("save_checkpoint / config / an object",
         lambda env: save_checkpoint(env.tmp / "s4", env.model, config={"x": object()}, step=0),
         "config"),
    Case("save_checkpoint / tokenizer_path / a missing file",
         lambda env: save_checkpoint(env.tmp / "s6", env.model, config={}, step=0,
                                     tokenizer_path=env.tmp / "missing.json"), "tokenizer_path"),
    Case("load_checkpoint / directory / an empty folder",
         lambda env: load_checkpoint(_empty_dir(env, "empty1")), "directory"),
    Case("load_checkpoint / model / other shapes",
         lambda env: load_checkpoint(env.step4, env.model), "model"),
    Case("load_checkpoint / model / a string",
         lambda env: load_checkpoint(env.step4, "model"), "model"),
    Case("load_checkpoint / optimizer.pt / a malicious pickle", _malicious_optimizer,
         "optimizer.pt"),
    Case("load_checkpoint / rng.json / edited",
         lambda env: load_checkpoint(_file_edited("rng.json", b"{}")(env)),
         "rng.json"),
    Case("load_weights / directory / an empty folder",
         lambda env: load_weights(_empty_dir(env, "empty2")), "directory"),
    Case("prune_checkpoints / keep_last / 0", lambda env: prune_checkpoints(env.run, 0),
         "keep_last"),
    Case("resolve_checkpoint / checkpoint / a missing folder",
         lambda env: resolve_checkpoint(env.tmp / "missing"), "checkpoint"),
    Case("resolve_checkpoint / checkpoint / an empty folder",
         lambda env: resolve_checkpoint(_empty_dir(env, "empty3")), "checkpoint"),
    Case("average_checkpoints / directories / []", lambda env: average_checkpoints([]),
         "directories"),
    Case("average_checkpoints / directories / a string",
         lambda env: average_checkpoints(str(env.step4)), "directories"),
    Case("load_trained / average / 0", lambda env: load_trained(env.run, average=0), "average"),
    Case("load_trained / average / 5 of 2", lambda env: load_trained(env.run, average=5),
         "average"),
    Case("load_trained / average / 2 ending at step_2 (the first)",
         lambda env: load_trained(env.step2, average=2), "average"),
    Case("load_trained / device / 'tpu'", lambda env: load_trained(env.step4, device="tpu"),
         "device"),
    Case("load_trained / select / 'best'", lambda env: load_trained(env.run, select="best"),
         "select"),
    Case("load_trained / select / best-val of a checkpoint folder",
         lambda env: load_trained(env.step4, select="best-val"), "checkpoint"),
    Case("load_trained / select / best-val-bleu of a run without BLEU",
         lambda env: load_trained(env.run, select="best-val-bleu"), "checkpoint"),
    # checkpoint.json and the files it lists
    Case("load_trained / checkpoint.json / not JSON",
         _loaded(_file_edited("checkpoint.json", b"{not json")), "checkpoint.json"),
    Case("load_trained / checkpoint.json / a list", _loaded(lambda env: _copy(env, lambda m: [])),
         "checkpoint.json"),
    Case("load_trained / checkpoint.json sha256 / a list",
         _loaded(lambda env: _copy(env, _set("sha256", ["model.safetensors"]))),
         "checkpoint.json"),
    Case("load_trained / checkpoint.json step / missing",
         _loaded(lambda env: _copy(env, lambda m: m.pop("step") and None)), "checkpoint.json"),
    Case("load_trained / checkpoint.json step / 'ten'",
         _loaded(lambda env: _copy(env, _set("step", "ten"))), "checkpoint.json"),
    Case("load_trained / checkpoint.json tied / an unknown tensor",
         _loaded(lambda env: _copy(env, _set("tied", {"generator.weight": "nowhere"}))),
         "checkpoint.json"),
    Case("load_trained / checkpoint.json sha256 / a key outside the folder",
         _loaded(_outside_key), "checkpoint.json"),
    Case("load_trained / checkpoint.json config / norm_first flipped",
         _loaded(lambda env: _copy(env, _norm_first, rehash=False)), "checkpoint.json"),
    Case("load_trained / checkpoint.json / format 1 without its hash, layer_norm_eps 0.1",
         _loaded(_downgraded), "checkpoint.sha256"),
    Case("load_trained / checkpoint.json config / a number",
         _loaded(lambda env: _copy(env, _set("config", 5))), "checkpoint.json"),
    Case("load_trained / model.safetensors / one byte flipped",
         _loaded(_file_edited("model.safetensors", b"\x00" * 64)), "model.safetensors"),
    Case("load_trained / tokenizer.json / replaced",
         _loaded(_file_edited("tokenizer.json", b"{}")), "tokenizer.json"),
    Case("restore_rng_state / state / {}", lambda env: restore_rng_state({}), "state"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", CHECKPOINT_CASES, ids=_ids(CHECKPOINT_CASES))
def test_checkpoints_and_runs_refuse(case, ckpt):
    _refused(case, ckpt)


# --------------------------------------------------------------------------- training


def _train(**kwargs: Any) -> Callable[[SimpleNamespace], Any]:
    """``train`` on the tiny config into a fresh folder; a refusal leaves no checkpoint."""

    def call(env: SimpleNamespace) -> Any:
        out = Path(tempfile.mkdtemp(prefix="train-", dir=env.tmp))
        try:
            return train(kwargs.get("run_config") or load_run_config(env.toml), out,
                         **{"progress": False, "results_dir": env.tmp / "results",
                            **{k: v for k, v in kwargs.items() if k != "run_config"}})
        finally:
            assert not list(out.glob("step_*")), "a refused run wrote checkpoints"

    return call


def _a_file(env: SimpleNamespace) -> Path:
    path = env.tmp / "a-file"
    path.write_text("not a folder")
    return path


LOGITS = torch.randn(2, 3, 5)
TARGETS = torch.tensor([[1, 2, 3], [4, 1, 0]])
TRAINING_CASES = [
    Case("train / run_config / a dict", _train(run_config={"model": {}}), "run_config"),
    Case("train / resume / 'yes'", _train(resume="yes"), "resume"),
    Case("train / bleu_sentences / -1", _train(bleu_sentences=-1), "bleu_sentences"),
    Case("train / val_sentences / 0", _train(val_sentences=0), "val_sentences"),
    Case("train / device / 'tpu'", _train(device="tpu"), "device"),
    Case("train / results_dir / a file", lambda env: _train(results_dir=_a_file(env))(env),
         "results"),
    Case("train / out_dir / a run with checkpoints, resume=False",
         lambda env: train(load_run_config(env.toml), env.run, resume=False, progress=False,
                           results_dir=None), "resume"),
    Case("train / [model] max_len / changed on resume",
         lambda env: train(load_run_config(env.toml).__class__.from_dict(
             {**load_run_config(env.toml).to_dict(),
              "model": {"preset": "tiny", "d_model": 16, "d_ff": 32, "num_heads": 2,
                        "num_encoder_layers": 1, "num_decoder_layers": 1, "max_len": 120}}),
             env.run, progress=False, results_dir=None), "max_len"),
    Case("noam_lr / step / -1", lambda env: noam_lr(-1, 512, 4000), "step"),
    Case("noam_lr / d_model / 0", lambda env: noam_lr(1, 0, 4000), "d_model"),
    Case("noam_lr / warmup_steps / 0", lambda env: noam_lr(1, 512, 0), "warmup_steps"),
    Case("noam_lr / factor / 0", lambda env: noam_lr(1, 512, 10, factor=0), "factor"),
    Case("noam_lr / factor / inf", lambda env: noam_lr(1, 512, 10, factor=INF), "factor"),
    Case("make_optimizer / model / no parameters",
         lambda env: make_optimizer(torch.nn.ReLU(), 16, 10), "model"),
    Case("make_optimizer / factor / 1e45",
         lambda env: make_optimizer(env.model, 16, 10, factor=1e45), "factor"),
    Case("label_smoothed_cross_entropy / logits / an int tensor",
         lambda env: label_smoothed_cross_entropy(LOGITS.long(), TARGETS), "logits"),
    Case("label_smoothed_cross_entropy / targets / a float tensor",
         lambda env: label_smoothed_cross_entropy(LOGITS, TARGETS.float()), "targets"),
    Case("label_smoothed_cross_entropy / targets / shape (2, 2)",
         lambda env: label_smoothed_cross_entropy(LOGITS, TARGETS[:, :2]), "targets"),
    Case("label_smoothed_cross_entropy / targets / id 7 of 5",
         lambda env: label_smoothed_cross_entropy(LOGITS, TARGETS + 4), "targets"),
    Case("label_smoothed_cross_entropy / targets / all padding",
         lambda env: label_smoothed_cross_entropy(LOGITS, torch.zeros_like(TARGETS)),
         "targets"),
    Case("label_smoothed_cross_entropy / smoothing / 1.5",
         lambda env: label_smoothed_cross_entropy(LOGITS, TARGETS, smoothing=1.5), "smoothing"),
    Case("label_smoothed_cross_entropy / reduction / 'max'",
         lambda env: label_smoothed_cross_entropy(LOGITS, TARGETS, reduction="max"),
         "reduction"),
    Case("label_smoothed_cross_entropy / check / 1",
         lambda env: label_smoothed_cross_entropy(LOGITS, TARGETS, check=1), "check"),
    Case("count_tokens / targets / a float tensor",
         lambda env: count_tokens(TARGETS.float()), "targets"),
    Case("smoothed_target_distribution / vocab_size / 0",
         lambda env: smoothed_target_distribution(TARGETS, 0), "vocab_size"),
    Case("smoothed_target_distribution / smoothing / -0.1",
         lambda env: smoothed_target_distribution(TARGETS, 5, smoothing=-0.1), "smoothing"),
    Case("smoothed_target_distribution / targets / id 9 of 5",
         lambda env: smoothed_target_distribution(TARGETS + 5, 5), "targets"),
    Case("check_ids / train source / id 500 of 400",
         lambda env: check_ids([[1, 500]], 400, "train source"), "train source"),
    Case("check_ids / val target / id -1", lambda env: check_ids([[-1]], 400, "val target"),
         "val target"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", TRAINING_CASES, ids=_ids(TRAINING_CASES))
def test_training_entry_points_refuse(case, ckpt):
    _refused(case, ckpt)


# --------------------------------------------------------------------------- figures

FIGURE_CASES = [
    Case("as_array / values / a string", lambda env: as_array("abc", "values", 1), "values"),
    Case("as_array / values / 2-D for 1-D", lambda env: as_array([[1, 2]], "values", 1),
         "values"),
    Case("as_array / values / []", lambda env: as_array([], "values", 1), "values"),
    Case("as_array / values / NaN", lambda env: as_array([1, NAN], "values", 1), "values"),
    Case("as_array / values / 2 for size 3", lambda env: as_array([1, 2], "values", 1, size=3),
         "values"),
    Case("as_array / values / 0 on a log axis",
         lambda env: as_array([0, 1], "values", 1, positive=True), "values"),
    Case("moving_average / window / 0", lambda env: moving_average([1.0, 2.0], 0), "window"),
    Case("lr_schedules / steps / a tensor with inf",
         lambda env: lr_schedules(torch.tensor([1.0, INF]), {"a": [1, 2]}), "steps"),
    Case("lr_schedules / schedules / {}", lambda env: lr_schedules([1, 2], {}), "schedules"),
    Case("lr_schedules / schedules['a'] / 3 values for 2 steps",
         lambda env: lr_schedules([1, 2], {"a": [1, 2, 3]}), "schedules['a']"),
    Case("token_budget_batches / max_tokens / 0",
         lambda env: figures.training.token_budget_batches([3, 4], [2, 1], 0, {"a": [0.1]}),
         "max_tokens"),
    Case("token_budget_batches / padding / {}",
         lambda env: figures.training.token_budget_batches([3, 4], [2, 1], 10, {}), "padding"),
    Case("training_curves / runs / {}", lambda env: figures.training.training_curves({}),
         "runs"),
    Case("encoding_heatmap / pe / 1-D", lambda env: figures.positional.encoding_heatmap([1.0]),
         "pe"),
    Case("encoding_heatmap / curves / 9 of 4 dimensions",
         lambda env: figures.positional.encoding_heatmap(torch.zeros(3, 4), curves=[9]),
         "curves"),
    Case("attention_heatmap / weights / a string",
         lambda env: figures.attention.attention_heatmap("w"), "weights"),
    Case("attention_heatmap / x_labels / 2 labels for 3 keys",
         lambda env: figures.attention.attention_heatmap(torch.rand(2, 3), x_labels=["a", "b"]),
         "x_labels"),
    Case("attention_heatmap / max_ticks / 0",
         lambda env: figures.attention.attention_heatmap(torch.rand(2, 3), max_ticks=0),
         "max_ticks"),
    Case("parameter_breakdown / unit / 0",
         lambda env: figures.model.parameter_breakdown(["m"], {"a": [1.0]}, unit=0), "unit"),
    Case("parameter_breakdown / components['a'] / -1 parameters",
         lambda env: figures.model.parameter_breakdown(["m"], {"a": [-1.0]}),
         "components['a']"),
    Case("variance_vs_dk / d_ks / 0 on a log axis",
         lambda env: figures.selfattention.variance_vs_dk([0, 1], [1, 1], [1, 1]), "d_ks"),
    Case("training_time_bars / hours / -2",
         lambda env: figures.scaling.training_time_bars(["a"], [-2.0]), "hours"),
]


@pytest.mark.parametrize("case", FIGURE_CASES, ids=_ids(FIGURE_CASES))
def test_figures_refuse(case, api):
    _refused(case, api)


# --------------------------------------------------------------------------- course and util


def _notebook_dir(env: SimpleNamespace, source: str) -> Path:
    """A folder with one notebook whose only code cell is ``source``."""
    import nbformat

    folder = Path(tempfile.mkdtemp(prefix="notebooks-", dir=env.tmp))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nbformat.write(notebook, folder / "01_demo.ipynb")
    return folder


COURSE_CASES = [
    Case("run_check / exercise_id / '99.9'", lambda env: run_check("99.9", len), "exercise_id"),
    Case("check / exercise_id / 'nope'", lambda env: check("nope", len), "exercise_id"),
    Case("make_assignments / source_dir / an empty folder",
         lambda env: make_assignments(_empty_dir(env, "no-notebooks"), env.tmp / "out1"),
         "source_dir"),
    Case("make_assignments / notebook / an unclosed BEGIN SOLUTION",
         lambda env: make_assignments(_notebook_dir(env, "### BEGIN SOLUTION\nx = 1"),
                                      env.tmp / "out2"), "01_demo.ipynb"),
    Case("strip_solution / source / END SOLUTION without BEGIN",
         lambda env: strip_solution("x = 1\n### END SOLUTION", "01.1", where="demo cell 3"),
         "demo cell 3"),
    Case("strip_solution / source / two BEGIN SOLUTION",
         lambda env: strip_solution("### BEGIN SOLUTION\n### BEGIN SOLUTION", "01.1",
                                    where="demo cell 4"), "demo cell 4"),
    Case("cached_run / run_config / a dict",
         lambda env: course_cache.cached_run({}, "run", root=env.tmp), "run_config"),
    Case("cached_run / name / '../escape'",
         lambda env: course_cache.cached_run(RunConfig(), "../escape", root=env.tmp), "name"),
    Case("cached_run / bleu_sentences / -1",
         lambda env: course_cache.cached_run(RunConfig(), "run", root=env.tmp,
                                             bleu_sentences=-1), "bleu_sentences"),
    Case("config_hash / run_config / a string", lambda env: course_cache.config_hash("cfg"),
         "run_config"),
    # util: devices, seeds, files, records, timing
    Case("get_device / prefer / 'tpu'", lambda env: get_device("tpu"), "prefer"),
    Case("set_seed / seed / -1", lambda env: set_seed(-1), "seed"),
    Case("set_seed / seed / 1.5", lambda env: set_seed(1.5), "seed"),
    Case("atomic_write_json / data / NaN",
         lambda env: atomic_write_json(env.tmp / "x.json", {"loss": NAN}), "data"),
    Case("write_record / record / a list",
         lambda env: write_record(env.tmp / "records", "train", "x", [1]), "record"),
    Case("measure / repeats / 0", lambda env: measure({"f": lambda: None}, 0), "repeats"),
    Case("measure / clock / 'sundial'",
         lambda env: measure({"f": lambda: None}, 1, clock="sundial"), "clock"),
    Case("RNN / hidden_size / 0", lambda env: RNN(4, 0), "hidden_size"),
]


@pytest.mark.parametrize("case", COURSE_CASES, ids=_ids(COURSE_CASES))
def test_exercises_course_and_util_refuse(case, api):
    _refused(case, api)


# --------------------------------------------------------------------------- the command line


def _cli(*argv: Any, stdin: str | None = None) -> Callable[[SimpleNamespace], Any]:
    """A command line; ``argv`` items may be functions of the fixture (paths)."""
    return lambda env: ([str(a(env)) if callable(a) else str(a) for a in argv], stdin)


def _config_file(text: str) -> Callable[[SimpleNamespace], Path]:
    """The tiny run's TOML file with one line changed: ``"[section]\nkey = value"``."""

    def write(env: SimpleNamespace) -> Path:
        path = Path(tempfile.mkdtemp(prefix="cfg-", dir=env.tmp)) / "cli.toml"
        section, _, line = text.partition("\n")
        key = line.split("=")[0].strip()
        lines = env.toml.read_text().splitlines()
        start = lines.index(section) + 1
        end = next((i for i in range(start, len(lines)) if lines[i].startswith("[")), len(lines))
        found = [i for i in range(start, end) if lines[i].split("=")[0].strip() == key]
        if found:
            lines[found[0]] = line
        else:
            lines.insert(start, line)
        path.write_text("\n".join(lines) + "\n")
        return path

    return write


def _out(env: SimpleNamespace) -> Path:
    return Path(tempfile.mkdtemp(prefix="cli-out-", dir=env.tmp)) / "run"


_RUN, _STEP2 = (lambda env: env.run), (lambda env: env.step2)
_TRAIN = ("train", "--quiet", "--bleu-sentences", "0", "--val-sentences", "4")


def _train_cli(*extra: Any, config: Any = None) -> Callable[[SimpleNamespace], Any]:
    return _cli(*_TRAIN, "--config", config or (lambda env: env.toml), "--out", _out,
                "--results", lambda env: env.tmp / "cli-results", *extra)


def _translate_cli(*extra: Any, stdin: str | None = None, sentence: str = "Ein Hund."
                   ) -> Callable[[SimpleNamespace], Any]:
    return _cli("translate", sentence, "--checkpoint", _RUN, *extra, stdin=stdin)


def _evaluate_cli(*extra: Any, checkpoint: Any = _RUN) -> Callable[[SimpleNamespace], Any]:
    return _cli("evaluate", "--checkpoint", checkpoint, "--limit", "2",
                "--results", lambda env: env.tmp / "eval-results", *extra)


def _hypotheses_under_a_file(env: SimpleNamespace) -> Path:
    return _a_file(env) / "hypotheses.txt"


CLI_CASES = [
    # assignments
    Case("assignments / --source / an empty folder",
         _cli("assignments", "--source", lambda env: _empty_dir(env, "cli-empty"),
              "--out", lambda env: env.tmp / "cli-assign"), "source_dir"),
    Case("assignments / --source / an unclosed BEGIN SOLUTION",
         _cli("assignments", "--source", lambda env: _notebook_dir(env, "### BEGIN SOLUTION"),
              "--out", lambda env: env.tmp / "cli-assign2"), "01_demo.ipynb"),
    # train: the config file
    Case("train / --config / a missing file",
         _train_cli(config=lambda env: env.tmp / "missing.toml"), "path"),
    Case("train / --config / not valid TOML",
         _train_cli(config=lambda env: (env.tmp / "broken.toml").write_text("[model")
                    and env.tmp / "broken.toml"), "path"),
    Case("train / [data] src / 'xx'", _train_cli(config=_config_file('[data]\nsrc = "xx"')),
         "[data] src"),
    Case("train / [data] vocab_size / 100",
         _train_cli(config=_config_file("[data]\nvocab_size = 100")), "[data] vocab_size"),
    Case("train / [data] data_dir / a missing folder",
         _train_cli(config=lambda env: _config_file(
             f'[data]\ndata_dir = "{env.tmp / "no-such-folder"}"')(env)), "no-such-folder"),
    Case("train / [model] vocab_size / 999",
         _train_cli(config=_config_file("[model]\nvocab_size = 999")), "[model] vocab_size"),
    Case("train / [model] dropout / 2", _train_cli(config=_config_file("[model]\ndropout = 2")),
         "[model] dropout"),
    Case("train / [train] precision / 'fp8'",
         _train_cli(config=_config_file('[train]\nprecision = "fp8"')), "[train] precision"),
    Case("train / [train] lr_factor / 1e45",
         _train_cli(config=_config_file("[train]\nlr_factor = 1e45")), "lr_factor"),
    Case("train / [decode] alpha / inf",
         _train_cli(config=_config_file("[decode]\nalpha = inf")), "[decode] alpha"),
    Case("train / [decode] max_len_b / -10",
         _train_cli(config=_config_file("[decode]\nmax_len_b = -10")), "[decode] max_len_b"),
    Case("train / [train] key / 'learning_rate'",
         _train_cli(config=_config_file("[train]\nlearning_rate = 0.1")), "learning_rate"),
    # train: the options
    Case("train / --max-steps / 0", _train_cli("--max-steps", "0"), "max_steps"),
    Case("train / --max-minutes / -1", _train_cli("--max-minutes", "-1"), "max_minutes"),
    Case("train / --max-minutes / nan", _train_cli("--max-minutes", "nan"), "max_minutes"),
    Case("train / --bleu-sentences / -1", _train_cli("--bleu-sentences", "-1"),
         "bleu_sentences"),
    Case("train / --val-sentences / 0", _train_cli("--val-sentences", "0"), "val_sentences"),
    Case("train / --seed / -1", _train_cli("--seed", "-1"), "seed"),
    Case("train / --fast / resuming a run trained without it",
         _cli(*_TRAIN, "--config", lambda env: env.toml, "--out", _RUN, "--fast",
              "--results", lambda env: env.tmp / "cli-results"), "fast"),
    Case("train / --results / an existing file",
         _cli(*_TRAIN, "--config", lambda env: env.toml, "--out", _out, "--results", _a_file),
         "--results"),
    Case("train / --device / 'tpu'", _train_cli("--device", "tpu"), "--device"),
    Case("train / --no-resume / into a run with checkpoints",
         _cli(*_TRAIN, "--config", lambda env: env.toml, "--out", _RUN, "--no-resume",
              "--results", lambda env: env.tmp / "cli-results"), "resume"),
    Case("train / [model] max_len / changed in a run with checkpoints",
         _cli(*_TRAIN, "--config", _config_file("[model]\nmax_len = 120"), "--out", _RUN,
              "--results", lambda env: env.tmp / "cli-results"), "max_len"),
    # translate
    Case("translate / sentences / ''", _translate_cli(sentence=""), "sentences[0]"),
    Case("translate / sentences / blank lines on stdin",
         _translate_cli(sentence="-", stdin="\n  \n"), "sentences"),
    Case("translate / sentences / a lone surrogate",
         _translate_cli(sentence="ein \udcff Hund"), "sentences[0]"),
    Case("translate / sentences / 300 words for 128 positions",
         _translate_cli(sentence="Fahrrad " * 300), "sentences[0]"),
    Case("translate / --checkpoint / a missing folder",
         _cli("translate", "Ein Hund.", "--checkpoint", lambda env: env.tmp / "nowhere"),
         "checkpoint"),
    Case("translate / --checkpoint / an empty folder",
         _cli("translate", "Ein Hund.", "--checkpoint", lambda env: _empty_dir(env, "cli-e2")),
         "checkpoint"),
    Case("translate / --checkpoint / checkpoint.json edited",
         _cli("translate", "Ein Hund.", "--checkpoint",
              lambda env: _copy(env, _norm_first, rehash=False)), "checkpoint.json"),
    Case("translate / --checkpoint / model.safetensors corrupted",
         _cli("translate", "Ein Hund.", "--checkpoint",
              _file_edited("model.safetensors", b"\x00" * 64)), "model.safetensors"),
    Case("translate / --beam / 0", _translate_cli("--beam", "0"), "beam"),
    Case("translate / --beam / wider than the vocabulary", _translate_cli("--beam", "100000"),
         "beam"),
    Case("translate / --alpha / inf", _translate_cli("--beam", "2", "--alpha", "inf"), "alpha"),
    Case("translate / --alpha / nan", _translate_cli("--beam", "2", "--alpha", "nan"), "alpha"),
    Case("translate / --alpha / -1 with greedy", _translate_cli("--beam", "1", "--alpha", "-1"),
         "alpha"),
    Case("translate / --alpha / 1000", _translate_cli("--beam", "2", "--alpha", "1000"),
         "alpha"),
    Case("translate / --device / 'tpu'", _translate_cli("--device", "tpu"), "--device"),
    # evaluate
    Case("evaluate / --limit / 0", _evaluate_cli("--limit", "0"), "--limit"),
    Case("evaluate / --limit / -3", _evaluate_cli("--limit", "-3"), "--limit"),
    Case("evaluate / --average / 0", _evaluate_cli("--average", "0"), "--average"),
    Case("evaluate / --average / 5 of 2", _evaluate_cli("--average", "5"), "average"),
    Case("evaluate / --average / 2 ending at step_2 (the first)",
         _evaluate_cli("--average", "2", checkpoint=_STEP2), "average"),
    Case("evaluate / --split / 'dev'", _evaluate_cli("--split", "dev"), "split"),
    Case("evaluate / --select / 'best'", _evaluate_cli("--select", "best"), "--select"),
    Case("evaluate / --select / best-val of a checkpoint folder",
         _evaluate_cli("--select", "best-val", checkpoint=_STEP2), "checkpoint"),
    Case("evaluate / --select / best-val-bleu of a run without BLEU",
         _evaluate_cli("--select", "best-val-bleu"), "checkpoint"),
    Case("evaluate / --beam / 0", _evaluate_cli("--beam", "0"), "beam"),
    Case("evaluate / --alpha / inf", _evaluate_cli("--beam", "2", "--alpha", "inf"), "alpha"),
    Case("evaluate / --checkpoint / a missing folder",
         _evaluate_cli(checkpoint=lambda env: env.tmp / "nowhere"), "checkpoint"),
    Case("evaluate / --results / an existing file",
         _cli("evaluate", "--checkpoint", _RUN, "--limit", "2", "--results", _a_file),
         "--results"),
    Case("evaluate / --hypotheses / a path under a file",
         _evaluate_cli("--hypotheses", _hypotheses_under_a_file), "--hypotheses"),
    Case("evaluate / --device / 'tpu'", _evaluate_cli("--device", "tpu"), "--device"),
]
if not torch.cuda.is_available():
    CLI_CASES += [
        Case("train / --device / 'cuda' without CUDA", _train_cli("--device", "cuda"),
             "--device"),
        Case("translate / --device / 'cuda' without CUDA", _translate_cli("--device", "cuda"),
             "--device"),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("case", CLI_CASES, ids=_ids(CLI_CASES))
def test_cli_commands_refuse(case, ckpt, capsys, monkeypatch):
    argv, stdin = case.call(ckpt)
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    capsys.readouterr()
    checkpoints_before = sorted(ckpt.run.glob("step_*"))
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, f"exit status {code}, stderr {err!r}"
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {err!r}"
    assert lines[0].startswith(f"transformer-book {argv[0]}: error: "), lines[0]
    assert case.names in lines[0], f"the message does not name {case.names!r}: {lines[0]}"
    assert sorted(ckpt.run.glob("step_*")) == checkpoints_before, "the run lost a checkpoint"
    if argv[0] == "train" and "--out" in argv:
        out = Path(argv[argv.index("--out") + 1])
        if out != ckpt.run:
            assert not list(out.glob("step_*")), "a refused run wrote checkpoints"


# --------------------------------------------------------------------------- course outputs
# assignments, assignments --nbgrader and grade: no command writes over its own input, an
# existing file as --out and a broken notebook are one line, and nothing is written; marks
# that cannot be merged (grade --marks) are refused before any notebook runs.

MASTER = Path(__file__).resolve().parents[1] / "notebooks" / "00_how_to_use.ipynb"


def _course_tree(tmp: Path) -> SimpleNamespace:
    """``src/`` (one master), ``subs/alice/`` (its copy) and ``marks.csv`` under ``tmp``."""
    (tmp / "src").mkdir()
    shutil.copy(MASTER, tmp / "src" / MASTER.name)
    (tmp / "subs" / "alice").mkdir(parents=True)
    shutil.copy(MASTER, tmp / "subs" / "alice" / MASTER.name)
    (tmp / "a-file").write_text("not a folder")
    return SimpleNamespace(tmp=tmp, src=tmp / "src", subs=tmp / "subs")


def _marks(text: str) -> Callable[[SimpleNamespace], Path]:
    def write(env: SimpleNamespace) -> Path:
        path = env.tmp / "marks.csv"
        path.write_text(text, encoding="utf-8")
        return path

    return write


def _broken_source(env: SimpleNamespace) -> Path:
    (env.src / "01_broken.ipynb").write_text('{"cells": [', encoding="utf-8")
    return env.src


_GRADE = ("grade", lambda env: env.subs, "--source", lambda env: env.src, "--quiet")
OUTPUT_CASES = [
    Case("assignments / --out / equal to --source",
         _cli("assignments", "--source", lambda env: env.src, "--out", lambda env: env.src),
         "--out"),
    Case("assignments / --out / inside --source",
         _cli("assignments", "--source", lambda env: env.src, "--out",
              lambda env: env.src / "students"), "--out"),
    Case("assignments / --out / holding --source",
         _cli("assignments", "--source", lambda env: env.src, "--out", lambda env: env.tmp),
         "--out"),
    Case("assignments / --out / an existing file",
         _cli("assignments", "--source", lambda env: env.src, "--out",
              lambda env: env.tmp / "a-file"), "--out"),
    Case("assignments / --source / a notebook that is not JSON",
         _cli("assignments", "--source", _broken_source, "--out",
              lambda env: env.tmp / "students"), "01_broken.ipynb"),
    Case("assignments --nbgrader / --out / equal to --source",
         _cli("assignments", "--nbgrader", "--source", lambda env: env.src, "--out",
              lambda env: env.src), "--out"),
    Case("assignments --nbgrader / --out / inside --source",
         _cli("assignments", "--nbgrader", "--source", lambda env: env.src, "--out",
              lambda env: env.src / "nb"), "--out"),
    Case("assignments --nbgrader / --out / an existing file",
         _cli("assignments", "--nbgrader", "--source", lambda env: env.src, "--out",
              lambda env: env.tmp / "a-file"), "--out"),
    Case("assignments --nbgrader / --source / a notebook that is not JSON",
         _cli("assignments", "--nbgrader", "--source", _broken_source, "--out",
              lambda env: env.tmp / "nb"), "01_broken.ipynb"),
    Case("grade / --out / equal to --source", _cli(*_GRADE, "--out", lambda env: env.src),
         "--out"),
    Case("grade / --out / inside --source",
         _cli(*_GRADE, "--out", lambda env: env.src / "grades"), "--out"),
    Case("grade / --out / holding --source", _cli(*_GRADE, "--out", lambda env: env.tmp),
         "--out"),
    Case("grade / --out / equal to SUBMISSIONS", _cli(*_GRADE, "--out", lambda env: env.subs),
         "--out"),
    Case("grade / --out / an existing file",
         _cli(*_GRADE, "--out", lambda env: env.tmp / "a-file"), "--out"),
    Case("grade / --out / inside SUBMISSIONS",
         _cli(*_GRADE, "--out", lambda env: env.subs / "grades"), "--out"),
    Case("grade / --source / a master that is not JSON",
         _cli("grade", lambda env: env.subs, "--source", _broken_source, "--quiet", "--out",
              lambda env: env.tmp / "g"), "01_broken.ipynb"),
    Case("grade / --marks / a missing file",
         _cli(*_GRADE, "--out", lambda env: env.tmp / "g", "--marks",
              lambda env: env.tmp / "none.csv"), "--marks"),
    Case("grade / --marks / no header",
         _cli(*_GRADE, "--out", lambda env: env.tmp / "g", "--marks",
              _marks("alice,00.2,1,\n")), "--marks"),
    Case("grade / --marks / above the exercise's points",
         _cli(*_GRADE, "--out", lambda env: env.tmp / "g", "--marks",
              _marks("student,exercise,points,comment\nalice,00.2,5,generous\n")), "00.2"),
    Case("grade / --marks / negative points",
         _cli(*_GRADE, "--out", lambda env: env.tmp / "g", "--marks",
              _marks("student,exercise,points,comment\nalice,00.2,-1,\n")), "00.2"),
    Case("grade / --marks / points that are no number",
         _cli(*_GRADE, "--out", lambda env: env.tmp / "g", "--marks",
              _marks("student,exercise,points,comment\nalice,00.2,good,\n")), "points"),
    Case("grade / --marks / an unknown student",
         _cli(*_GRADE, "--out", lambda env: env.tmp / "g", "--marks",
              _marks("student,exercise,points,comment\nmallory,00.2,1,\n")), "mallory"),
    Case("grade / --marks / an unknown exercise",
         _cli(*_GRADE, "--out", lambda env: env.tmp / "g", "--marks",
              _marks("student,exercise,points,comment\nalice,00.9,1,\n")), "00.9"),
    Case("grade / --marks / a mark given twice",
         _cli(*_GRADE, "--out", lambda env: env.tmp / "g", "--marks",
              _marks("student,exercise,points,comment\nalice,00.2,1,\nalice,00.2,0,\n")),
         "00.2"),
]


def _tree_hash(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): sha256_file(p) if p.is_file() else "folder"
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("case", OUTPUT_CASES, ids=_ids(OUTPUT_CASES))
def test_course_commands_refuse_and_write_nothing(case, tmp_path, capsys):
    env = _course_tree(tmp_path)
    argv, _ = case.call(env)
    before = _tree_hash(tmp_path)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, f"exit status {code}, stderr {err!r}"
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {err!r}"
    assert lines[0].startswith(f"transformer-book {argv[0]}: error: "), lines[0]
    assert case.names in lines[0], f"the message does not name {case.names!r}: {lines[0]}"
    assert _tree_hash(tmp_path) == before, "a refused command changed the files"
