"""TransformerConfig, its presets, and the TOML run configs in configs/."""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer_book.nn.config import PRESETS, TransformerConfig
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
        ({"positional": "rotary"}, r"positional: expected one of \('sinusoidal', 'learned'\), "
                                   r"received 'rotary'"),
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
    assert small.train.max_minutes == 90
    assert small.train.warmup_steps < 1000, "warmup must fit a ~2,500-step CPU run"
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
