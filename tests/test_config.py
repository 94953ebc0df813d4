"""TransformerConfig, its presets, and the TOML run configs in configs/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from transformer_book.nn.config import PRESETS, TransformerConfig
from transformer_book.run.checkpoint import save_checkpoint
from transformer_book.run.config import RunConfig, load_run_config
from transformer_book.util.validation import BookError

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_defaults_are_the_paper_base_model():
    config = TransformerConfig(vocab_size=37000)
    assert (config.d_model, config.num_heads, config.d_ff) == (512, 8, 2048)
    assert (config.num_encoder_layers, config.num_decoder_layers) == (6, 6)
    assert config.d_k == config.d_v == 64
    assert config.dropout == 0.1 and config.label_smoothing == 0.1
    assert config.attention_dropout == 0.0 and not config.norm_first and config.tie_embeddings


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_build(name):
    config = TransformerConfig.preset(name, vocab_size=1000)
    assert config.d_k * config.num_heads == config.d_model


def test_preset_values():
    base = TransformerConfig.preset("base", 100)
    assert base == TransformerConfig(vocab_size=100)
    big = TransformerConfig.preset("big", 100)
    assert (big.d_model, big.d_ff, big.num_heads, big.dropout) == (1024, 4096, 16, 0.3)
    small = TransformerConfig.preset("small", 100)
    assert (small.d_model, small.num_encoder_layers, small.d_ff) == (256, 3, 1024)
    tiny = TransformerConfig.preset("tiny", 100, dropout=0.0)
    assert (tiny.d_model, tiny.num_heads, tiny.dropout) == (64, 4, 0.0)


def test_unknown_preset_lists_valid_ones():
    valid = r"\['base', 'big', 'small', 'tiny'\]"
    with pytest.raises(BookError, match=rf"name: expected one of {valid}"):
        TransformerConfig.preset("huge", 100)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"d_model": 100, "num_heads": 8},
         r"d_model: expected a multiple of num_heads=8, received 100"),
        ({"dropout": 1.0}, r"dropout: expected a number in \[0, 1\), received 1.0"),
        ({"dropout": -0.1}, r"dropout: expected .*received -0.1"),
        ({"attention_dropout": 2}, r"attention_dropout: expected"),
        ({"d_ff": 0}, r"d_ff: expected an integer >= 1, received 0"),
        ({"num_encoder_layers": -1}, r"num_encoder_layers: expected an integer >= 1"),
        ({"vocab_size": 0}, r"vocab_size: expected an integer >= 1, received 0"),
        ({"max_len": 2.5}, r"max_len: expected an integer >= 1, received 2.5"),
        ({"positional": "alibi"}, r"positional: expected one of \['fourier', 'learned', "
                                  r"'none', 'rotary', 'sinusoidal'\], received 'alibi'"),
        ({"label_smoothing": 1.5}, r"label_smoothing: expected"),
        ({"layer_norm_eps": 0.0}, r"layer_norm_eps: expected a positive number, received 0.0"),
        ({"eos_id": 50}, r"eos_id: expected an id < vocab_size=50, received 50"),
        ({"bos_id": 0}, r"pad_id/bos_id/eos_id: expected three different ids"),
        ({"norm_first": "yes"}, r"norm_first: expected a bool"),
    ],
)
def test_bad_fields_are_named(changes, match):
    with pytest.raises(BookError, match=match):
        TransformerConfig(**{"vocab_size": 50, **changes})


def test_frozen():
    config = TransformerConfig(vocab_size=10)
    with pytest.raises(AttributeError):
        config.d_model = 8  # type: ignore[misc]


def test_dict_round_trip():
    config = TransformerConfig.preset("tiny", 321, positional="learned", norm_first=True)
    assert TransformerConfig.from_dict(config.to_dict()) == config
    assert config.replace(dropout=0.2).dropout == 0.2


def test_from_dict_unknown_keys_are_listed():
    data = {**TransformerConfig(vocab_size=10).to_dict(), "n_layers": 4, "heads": 2}
    with pytest.raises(BookError, match=r"d: expected TransformerConfig fields .* "
                                         r"received unknown keys \['heads', 'n_layers'\]"):
        TransformerConfig.from_dict(data)
    with pytest.raises(BookError, match=r"overrides: .*unknown keys \['layers'\]"):
        TransformerConfig.preset("tiny", 10, layers=3)


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.name)
def test_every_toml_in_configs_loads(path):
    run = load_run_config(path)
    model = run.model_config(run.data.vocab_size)
    assert model.vocab_size == run.data.vocab_size
    assert run.train.max_steps or run.train.max_minutes
    assert RunConfig.from_dict(run.to_dict(), source="round trip").to_dict() == run.to_dict()


def test_the_three_shipped_configs():
    names = {p.stem for p in CONFIGS.glob("*.toml")}
    assert {"tiny", "small", "base"} <= names
    small = load_run_config(CONFIGS / "small.toml")
    assert small.model_config(8000).d_model == 256
    assert (small.train.max_steps, small.train.max_minutes) == (2400, None), "counted in steps"
    assert small.train.warmup_steps < 1000, "warmup must fit a 2,400-step CPU run"
    base = load_run_config(CONFIGS / "base.toml")
    assert base.model_config(10000) == TransformerConfig(vocab_size=10000)
    assert (base.train.warmup_steps, base.train.precision) == (4000, "bf16")
    assert (base.decode.beam_size, base.decode.alpha, base.decode.max_len_b) == (4, 0.6, 50)


def _write(tmp_path, text):
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def test_unknown_section_names_file_and_section(tmp_path):
    path = _write(tmp_path, '[model]\npreset = "tiny"\n[optim]\nlr = 1\n')
    with pytest.raises(BookError, match=rf"{path}: expected sections .* "
                                         r"received unknown sections \['optim'\]"):
        load_run_config(path)


def test_unknown_keys_name_file_section_and_keys(tmp_path):
    path = _write(tmp_path, "[train]\nwarmup = 4000\nlr = 1.0\nmax_steps = 5\n")
    with pytest.raises(BookError, match=rf"{path} \[train\]: expected keys .* "
                                         r"received unknown keys \['lr', 'warmup'\]"):
        load_run_config(path)
    path = _write(tmp_path, '[model]\npreset = "tiny"\nlayers = 3\n')
    with pytest.raises(BookError, match=rf"{path} \[model\] overrides: expected TransformerConfig "
                                        r"fields .*unknown keys \['layers'\]"):
        load_run_config(path)


def test_bad_values_name_file_and_key(tmp_path):
    path = _write(tmp_path, '[train]\nprecision = "fp8"\n')
    with pytest.raises(BookError, match=rf"{path} \[train\] precision: expected one of"):
        load_run_config(path)
    path = _write(tmp_path, '[model]\npreset = "medium"\n')
    with pytest.raises(BookError, match=rf"{path} \[model\] preset: expected one of"):
        load_run_config(path)
    path = _write(tmp_path, "[train]\nwarmup_steps = 0\n")
    with pytest.raises(BookError, match=r"\[train\] warmup_steps: expected an integer >= 1"):
        load_run_config(path)


def test_missing_or_invalid_file(tmp_path):
    with pytest.raises(BookError, match=r"path: expected an existing TOML file"):
        load_run_config(tmp_path / "nope.toml")
    path = _write(tmp_path, "[model\n")
    with pytest.raises(BookError, match=r"path: expected valid TOML"):
        load_run_config(path)


def test_run_config_defaults_validate():
    run = RunConfig()
    assert run.decode.beam_size == 4 and run.decode.alpha == 0.6
    assert run.model_config(100).d_model == 256


def test_section_that_is_not_a_table(tmp_path):
    path = _write(tmp_path, "model = 3\n")
    with pytest.raises(BookError, match=rf"{path} \[model\]: expected a table, received 3"):
        load_run_config(path)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('[model]\ndropout = "0.1"\n',
         r"\[model\] dropout: expected a number in \[0, 1\), received '0.1'"),
        ("[model]\nd_model = 100\nnum_heads = 8\n", r"\[model\] d_model: expected a multiple"),
        ('[train]\nlr_factor = "1"\n', r"\[train\] lr_factor: expected a finite number > 0"),
        ("[train]\nclip_norm = nan\n", r"\[train\] clip_norm: expected a finite number > 0"),
        ("[train]\nmax_minutes = 0\n", r"\[train\] max_minutes: expected a finite number > 0"),
        ("[decode]\nalpha = -1\n", r"\[decode\] alpha: expected a finite number >= 0"),
        ("[decode]\nmax_len_a = true\n", r"\[decode\] max_len_a: expected a finite number >= 0"),
        ("[data]\ntrain_subset = 0\n", r"\[data\] train_subset: expected an integer >= 1"),
    ],
)
def test_bad_numbers_in_a_toml_are_book_errors(tmp_path, text, match):
    path = _write(tmp_path, text)
    with pytest.raises(BookError, match=rf"{path} {match}"):
        load_run_config(path)


# ---------------------------------------------------------------- checked when loaded


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[model]\nd_model = 10\n", r"\[model\] d_model: expected a multiple of num_heads=8"),
        ("[model]\nd_model = 9\nnum_heads = 3\n",
         r"\[model\] d_model: expected an even integer \(sin/cos pairs\), received 9 "
         r"\(\[model\] positional = 'sinusoidal'\)"),
        ("[model]\ndropout = 2\n", r"\[model\] dropout: expected a number in \[0, 1\)"),
        ("[model]\nvocab_size = 999\n", r"\[model\] vocab_size: expected no such key"),
        ("[model]\npad_id = 5\n", r"\[model\] pad_id: expected 0, the tokenizer's id"),
        ("[model]\neos_id = 2.0\n", r"\[model\] eos_id: expected 2, the tokenizer's id"),
        ('[data]\nsrc = "xx"\n', r"\[data\] src: expected one of \['de', 'en', 'fr'\], "
                                 r"received 'xx'"),
        ('[data]\ntgt = "de"\n', r"\[data\] tgt: expected a language different from src='de'"),
        ("[data]\nsrc = 3\n", r"\[data\] src: expected one of"),
        ("[data]\nvocab_size = 100\n", r"\[data\] vocab_size: expected an integer >= 260, "
                                       r"received 100"),
        ('[data]\nvocab_size = "8000"\n', r"\[data\] vocab_size: expected an integer >= 260"),
        ("[data]\nmax_tokens = 1\n", r"\[data\] max_tokens: expected an integer >= 256, the "
                                     r"longest pair kept"),
        ("[data]\nmax_tokens = 99\nmax_len = 100\n", r"\[data\] max_tokens: expected an "
                                                     r"integer >= 100"),
        ("[data]\nmax_tokens = 4096.0\n", r"\[data\] max_tokens: expected an integer"),
        ("[data]\ndata_dir = 5\n", r"\[data\] data_dir: expected a folder path"),
        ('[data]\ndata_dir = ""\n', r"\[data\] data_dir: expected a folder path"),
        ("[data]\nbpe_dropout = 1.0\n", r"\[data\] bpe_dropout: expected a number in \[0, 1\) "
                                       r"\(0: no BPE-dropout\), received 1.0"),
        ('[data]\nbpe_dropout = "0.1"\n', r"\[data\] bpe_dropout: expected a number in"),
        ("[data]\nbpe_dropout = nan\n", r"\[data\] bpe_dropout: expected a number in"),
        ("[train]\nlr_factor = 1e45\n", r"\[train\] lr_factor: expected at most .*finite in "
                                        r"float32, received 1e\+45"),
        ("[train]\nlr_factor = inf\n", r"\[train\] lr_factor: expected a finite number > 0"),
        ("[train]\nseed = -1\n", r"\[train\] seed: expected an integer >= 0"),
        ("[decode]\nbeam_size = 0\n", r"\[decode\] beam_size: expected an integer >= 1"),
    ],
)
def test_every_value_is_checked_when_the_toml_is_loaded(tmp_path, text, match):
    path = _write(tmp_path, text)
    with pytest.raises(BookError, match=rf"{path} {match}"):
        load_run_config(path)


def test_the_largest_finite_lr_factor_is_accepted_and_one_beyond_refused():
    # Adam's first step moves a weight by lr / (1 - 0.9): a float32 number.
    limit = 3.4028234663852886e38 * 0.1 * (256 * 4000) ** 0.5
    RunConfig.from_dict({"train": {"lr_factor": limit * 0.999}})
    with pytest.raises(BookError, match=r"RunConfig \[train\] lr_factor: expected at most"):
        RunConfig.from_dict({"train": {"lr_factor": limit * 1.01}})


def test_a_path_data_dir_is_kept_as_a_string(tmp_path):
    run = RunConfig.from_dict({"data": {"data_dir": tmp_path}})
    assert run.data.data_dir == str(tmp_path)


def test_a_changed_field_is_refused_when_the_data_is_prepared(tmp_path, monkeypatch):
    from transformer_book.train import corpus

    run = RunConfig()
    run.data.src = "xx"  # changed after it was validated
    monkeypatch.setattr(corpus, "load_corpus", _no_data)
    with pytest.raises(BookError, match=r"RunConfig \[data\] src: expected one of"):
        corpus.prepare_data(run, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def _no_data(*args, **kwargs):
    raise AssertionError("the data was read")


def test_cli_train_refuses_a_bad_config_before_reading_data(tmp_path, monkeypatch, capsys):
    from transformer_book import cli
    from transformer_book.train import corpus

    monkeypatch.setattr(corpus, "load_corpus", _no_data)
    path = _write(tmp_path, '[model]\npreset = "tiny"\n[data]\nsrc = "xx"\n')
    out = tmp_path / "run"
    code = cli.main(["train", "--config", str(path), "--out", str(out), "--results",
                     str(tmp_path / "results"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert f"{path} [data] src: expected one of ['de', 'en', 'fr'], received 'xx'" in err
    assert not out.exists() and not (tmp_path / "results").exists()


# ---------------------------------------------------------------- resume with another [data]


def _fake_run(folder, run):
    """A run folder as training leaves it: a tokenizer, its info and one checkpoint."""
    save_checkpoint(folder / "step_10", torch.nn.Linear(2, 2),
                    config={"model": {}, "run": run.to_dict()}, step=10)
    (folder / "tokenizer.json").write_text("the run's tokenizer")
    info = {"src": "de", "tgt": "en", "vocab_size": run.data.vocab_size,
            "train_subset": run.data.train_subset, "train_pairs": run.data.train_subset}
    (folder / "tokenizer-info.json").write_text(json.dumps(info))
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def _tiny_run(**data):
    return RunConfig.from_dict({"model": {"preset": "tiny", "max_len": 64},
                                "data": {"vocab_size": 500, "max_tokens": 512,
                                         "train_subset": 16, "max_len": 64, **data}})


def test_resume_with_another_data_section_writes_nothing(tmp_path, monkeypatch):
    from transformer_book.train import corpus

    before = _fake_run(tmp_path, _tiny_run())
    monkeypatch.setattr(corpus, "load_corpus", _no_data)
    with pytest.raises(BookError, match=r"resume: expected the config of the checkpoint "
                                        r".*step_10, received \[data\] vocab_size: 500 in the "
                                        r"checkpoint, 400 now"):
        corpus.prepare_data(_tiny_run(vocab_size=400), tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_resume_never_replaces_the_tokenizer_of_the_checkpoints(tmp_path, multi30k_dir):
    from transformer_book.train import corpus

    run = _tiny_run(data_dir=str(multi30k_dir))
    before = _fake_run(tmp_path, run)
    (tmp_path / "tokenizer-info.json").write_text('{"vocab_size": 999}')
    before["tokenizer-info.json"] = b'{"vocab_size": 999}'
    with pytest.raises(BookError, match=r"tokenizer.json: expected a tokenizer trained with "
                                        r".*received \{'vocab_size': 999\}"):
        corpus.prepare_data(run, tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_line_too_long_for_max_len_never_reaches_the_bpe_training(tmp_path, monkeypatch,
                                                                     multi30k_dir):
    """One space-free line of 3 MB used to keep the BPE training busy for over 10 minutes
    (quadratic in its length) only to be dropped by max_len afterwards: it is dropped first."""
    from transformer_book.data.tokenizer import BPETokenizer
    from transformer_book.train import corpus

    real_load, real_train, lengths = corpus.load_corpus, BPETokenizer.train, []

    def with_a_long_line(dataset, split, *args):
        pairs = real_load(dataset, split, *args)
        return [("x" * 3_000_000, "y"), *pairs] if split == "train" else pairs

    def train(texts, vocab_size):
        lengths.append(max(map(len, texts)))
        assert lengths[-1] < 3_000_000, "the BPE was given the 3 MB line"
        return real_train(texts, vocab_size)

    monkeypatch.setattr(corpus, "load_corpus", with_a_long_line)
    monkeypatch.setattr(BPETokenizer, "train", staticmethod(train))
    data = corpus.prepare_data(_tiny_run(data_dir=str(multi30k_dir)), tmp_path)
    assert lengths and lengths[0] < corpus.CHARS_PER_TOKEN * 64, "the BPE never saw it"
    assert data.stats["train_pairs"] == 16 and data.stats["train_kept"] <= 15
    assert all(len(src) < 3_000_000 for src, _ in data.train_pairs)
