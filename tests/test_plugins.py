"""The seams from outside the package: a module named by ``--plugin`` registers a decoding
strategy and a dataset with its own split names, one file and one registration each, and
both reach the CLI (options, choices, refusals), training (its validation BLEU), the
records and the test-split door, with no edit anywhere else."""

from __future__ import annotations

import itertools
import json
import sys
import uuid

import pytest

from transformer_book.cli import main
from transformer_book.data.corpora import DATASETS
from transformer_book.run.config import DECODING_STRATEGIES

PLUGIN = '''
"""A throwaway plugin: top-k sampling and a corpus of counting words."""
import itertools
from dataclasses import dataclass, field

import torch

from transformer_book.data.corpora import DATASETS, Dataset
from transformer_book.inference.generate import StepRule
from transformer_book.run.config import DECODING_STRATEGIES
from transformer_book.util.validation import require_int

WORDS = [("null", "zero"), ("eins", "one"), ("zwei", "two"), ("drei", "three")]


@dataclass(frozen=True)
class TopK(StepRule):
    """Each token drawn from the k most probable ones."""

    k: int = field(default=2, metadata={"help": "how many of the best tokens to draw from"})
    seed: int = 0

    def __post_init__(self):
        require_int(self.k, "k", minimum=1)

    def begin(self, device):
        return torch.Generator(device=device).manual_seed(self.seed)

    def step(self, t, logp, scores, generator):
        values, ids = logp[:, 0].topk(self.k, dim=-1)  # (B, k)
        pick = torch.multinomial(values.softmax(-1), 1, generator=generator)  # (B, 1)
        return scores + values.gather(1, pick), ids.gather(1, pick), torch.zeros_like(pick)


def counting(split, src, tgt, folder):
    numbers = {"train": range(0, 200), "valid": range(200, 230), "test": range(230, 260)}
    rows = []
    for n in numbers[split]:
        digits = [n // 4**k % 4 for k in (3, 2, 1, 0)]
        rows.append((" ".join(WORDS[d][0] for d in digits), " ".join(WORDS[d][1] for d in digits)))
    return rows if src == "de" else [(b, a) for a, b in rows]


DECODING_STRATEGIES.register("topk", TopK)
DATASETS.register("counting", Dataset(load=counting, languages=("de", "en"),
                                      split_names={"train": "fit", "valid": "dev",
                                                   "test": "heldout"}))
'''

CONFIG = """
[model]
preset = "tiny"
max_len = 32

[data]
dataset = "counting"
vocab_size = 300
max_tokens = 128
max_len = 16

[train]
max_steps = 10
warmup_steps = 5
eval_every = 10
checkpoint_every = 10
precision = "fp32"
bleu_strategy = "topk"

[decode]
strategy = "topk"
k = 3
max_len_a = 1.0
max_len_b = 4
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The plugin as a module file on sys.path; its entries are removed afterwards."""
    name = f"book_plugin_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(PLUGIN, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for registry, entry in ((DECODING_STRATEGIES, "topk"), (DATASETS, "counting")):
        if entry in registry:
            registry.unregister(entry)
    sys.modules.pop(name, None)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_plugin_strategy_and_dataset_reach_training_the_cli_and_the_records(
        plugin, tmp_path, capsys):
    config = tmp_path / "counting.toml"
    config.write_text(CONFIG, encoding="utf-8")
    results, run = tmp_path / "results", tmp_path / "run"
    assert main(["--plugin", plugin, "train", "--config", str(config), "--out", str(run),
                 "--results", str(results), "--quiet", "--bleu-sentences", "8"]) == 0
    capsys.readouterr()
    (record,) = [json.loads(p.read_text()) for p in results.glob("train-*.json")]
    assert {e.get("bleu_decoding") for e in record["evals"] if "bleu" in e} == {"topk"}

    # translate: the strategy's own option, generated from its field
    def lines(*options):
        assert main(["--plugin", plugin, "translate", "eins zwei drei null", "null null",
                     "--checkpoint", str(run), "--quiet", *options]) == 0
        return capsys.readouterr().out.splitlines()

    assert len(lines()) == 2  # the config's [decode]: topk, k = 3
    assert lines("--k", "1") == lines("--strategy", "greedy"), "top-1 sampling is greedy"
    with pytest.raises(SystemExit):
        main(["--plugin", plugin, "translate", "--help"])
    assert "--k K" in capsys.readouterr().out
    assert main(["--plugin", plugin, "translate", "x", "--checkpoint", str(run),
                 "--strategy", "topk", "--k", "0"]) == 2
    assert _one_line(capsys).startswith("transformer-book translate: error: --k: expected")

    # evaluate: the dataset's own split name, the strategy in the record
    assert main(["--plugin", plugin, "evaluate", "--checkpoint", str(run), "--split", "dev",
                 "--k", "2", "--strategy", "topk", "--results", str(results), "--quiet"]) == 0
    capsys.readouterr()
    (evaluation,) = [json.loads(p.read_text()) for p in results.glob("evaluate-*.json")]
    assert evaluation["split"] == "dev" and evaluation["num_hypotheses"] == 30
    assert evaluation["decoding"] == {"strategy": "topk", "k": 2, "seed": 0, "max_len_a": 1.0,
                                      "max_len_b": 4, "cache": "growing"}
    # its test split goes through the one door: a plan is asked for
    assert main(["--plugin", plugin, "evaluate", "--checkpoint", str(run),
                 "--split", "heldout"]) == 2
    assert "--plan: expected a plan committed before training" in _one_line(capsys)


def test_a_plugin_that_cannot_be_imported_is_one_line(capsys):
    assert main(["--plugin", "no_such_module_here", "env"]) == 2
    assert _one_line(capsys).startswith("transformer-book: error: --plugin: expected an "
                                        "importable module")


def test_the_registries_refuse_a_taken_name_and_list_their_entries():
    with pytest.raises(ValueError, match=r"^name: expected a decoding strategy name not yet "):
        DECODING_STRATEGIES.register("beam", object)
    assert DECODING_STRATEGIES.names()[:3] == ("beam", "greedy", "sample")
    assert list(itertools.islice(DATASETS, 2)) == ["multi30k", "parallel-text"]
