"""A mutation run over the model library: plant one plausible bug at a time in a copy of the
package, run the library's fast tests against it, and count the bugs they catch.

Usage: ``python scripts/mutation_run.py [--only NAME] [--results results]``. Each mutant
(:data:`MUTANTS`) replaces one exact snippet of one core module (the run refuses a snippet
that is missing or not unique: a mutant that silently mutates nothing would count as
caught by nobody). The package is copied into a temporary folder, mutated there, and the
tests of :data:`TESTS` run against the copy (``PYTHONPATH``), stopping at the first
failure, with a time limit (a hang counts as caught). A mutant that no test fails is a
survivor. The record (``results/mutation-<time>.json``) holds every mutant, whether it was
killed, by which test, and the seconds it took, with the CPU and the commit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from transformer_book.util.env import cpu_name  # noqa: E402
from transformer_book.util.records import git_commit, write_record  # noqa: E402

#: The fast tests of the library (the course's, the notebooks' and the slow ones left out).
TESTS = ("tests/test_attention.py", "tests/test_masks.py", "tests/test_model.py",
         "tests/test_positional.py", "tests/test_objective.py", "tests/test_train_step.py",
         "tests/test_decode.py", "tests/test_beam_reference.py", "tests/test_static_cache.py",
         "tests/test_decoding_strategies.py", "tests/test_data_batching.py",
         "tests/test_checkpoint.py", "tests/test_translate.py", "tests/test_evaluate.py",
         "tests/test_config.py", "tests/test_data_tokenizer.py", "tests/test_checks_switch.py")
LIMIT_SECONDS = 150

#: (name, module under src/transformer_book, exact snippet, its replacement)
MUTANTS: tuple[tuple[str, str, str, str], ...] = (
    ("attention: no 1/sqrt(d_k) scaling", "nn/attention.py",
     "scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])",
     "scores = q @ k.transpose(-2, -1)"),
    ("attention: scores scaled by d_k", "nn/attention.py",
     "return dot_score(q, k) / math.sqrt(q.shape[-1])",
     "return dot_score(q, k) / q.shape[-1]"),
    ("attention: the padding mask inverted", "nn/attention.py",
     "return (ids != pad_id)[:, None, None, :]", "return (ids == pad_id)[:, None, None, :]"),
    ("attention: the causal mask sees the future", "nn/attention.py",
     "return torch.ones(length, length, dtype=torch.bool, device=device).tril()",
     "return torch.ones(length, length, dtype=torch.bool, device=device).triu()"),
    ("attention: fully masked rows not zeroed", "nn/attention.py",
     "return weights.masked_fill(nothing_to_attend, 0.0)", "return weights"),
    ("masks: the shifted causal mask off by one", "nn/masks.py",
     "return torch.arange(total, device=device)[None, :] <= rows",
     "return torch.arange(total, device=device)[None, :] < rows"),
    ("layers: no residual connection", "nn/layers.py",
     "x = x + self.dropout(sublayer_out)", "x = self.dropout(sublayer_out)"),
    ("layers: post-LN normalises before the residual", "nn/layers.py",
     "return x if self.norm_first else norm(x)", "return x"),
    ("layers: the FFN without its ReLU", "nn/layers.py",
     "return self.linear2(F.relu(self.linear1(x)))", "return self.linear2(self.linear1(x))"),
    ("positional: sin and cos swapped", "nn/positional.py",
     "pe = torch.stack((angles.sin(), angles.cos()), dim=-1).reshape(length, d_model)",
     "pe = torch.stack((angles.cos(), angles.sin()), dim=-1).reshape(length, d_model)"),
    ("positional: frequencies over d_model/2", "nn/positional.py",
     "return torch.exp(-two_i * (math.log(base) / d_model))",
     "return torch.exp(-two_i * (math.log(base) / (d_model / 2)))"),
    ("transformer: embeddings not scaled by sqrt(d_model)", "nn/transformer.py",
     "self.embed_scale = math.sqrt(d)", "self.embed_scale = 1.0"),
    ("objective: no label smoothing on the true token", "train/objective.py",
     "per_token = ((1.0 - smoothing) * nll + smoothing * uniform) * keep",
     "per_token = (nll + smoothing * uniform) * keep"),
    ("objective: padding counted in the loss", "train/objective.py",
     "per_token = ((1.0 - smoothing) * nll + smoothing * uniform) * keep",
     "per_token = ((1.0 - smoothing) * nll + smoothing * uniform)"),
    ("objective: warmup exponent -1 instead of -1.5", "train/objective.py",
     "rate = factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)",
     "rate = factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.0)"),
    ("objective: no d_model^-0.5 factor", "train/objective.py",
     "rate = factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)",
     "rate = factor * min(step**-0.5, step * warmup_steps**-1.5)"),
    ("train step: the loss over source tokens", "train/step.py",
     "return None, 1.0 / batch.target_tokens", "return None, 1.0 / batch.source_tokens"),
    ("train step: the reported loss over all tokens", "train/step.py",
     "value = loss / target_tokens  # per target token", "value = loss / tokens"),
    ("batching: padding with id 1", "data/batching.py",
     "out = torch.full((len(sequences), length), pad_id, dtype=torch.long)",
     "out = torch.full((len(sequences), length), 1, dtype=torch.long)"),
    ("batching: the token mask inverted", "data/batching.py",
     "return ids != pad_id", "return ids == pad_id"),
    ("lengths: no cap at the model's positions", "inference/lengths.py",
     "return (max_len_a * src_len + max_len_b).long().clamp(1, max_positions - 1)",
     "return (max_len_a * src_len + max_len_b).long().clamp(1, max_positions)"),
    ("stepper: <bos> and <pad> may be generated", "inference/stepper.py",
     "return scores.index_fill_(1, self.never, -math.inf)", "return scores"),
    ("beam: the length penalty's 5 + |Y| as 1 + |Y|", "inference/beam.py",
     "return ((5 + length) / 6) ** check_alpha(alpha)",
     "return ((1 + length) / 6) ** check_alpha(alpha)"),
    ("beam: candidates K instead of 2K", "inference/beam.py",
     "cand, idx = fast_top_candidates(totals, 2 * self.beam_size)",
     "cand, idx = fast_top_candidates(totals, self.beam_size + 1)"),
    ("beam: parents and tokens swapped", "inference/beam.py",
     "return cand, idx % vocab, idx // vocab", "return cand, idx // vocab, idx % vocab"),
    ("beam: k_finished never stops", "inference/beam.py",
     "return stop | (finished >= self.beam_size) if self.stop == \"k_finished\" else stop",
     "return stop"),
    ("generate: <eos> below the top K finishes", "inference/generate.py",
     "ends = (ranked[:, :k] == eos) & cand[:, :k].isfinite()  # (B, K): they finish",
     "ends = (ranked == eos) & cand.isfinite()  # (B, K): they finish"),
    ("generate: survivors may end in <eos>", "inference/generate.py",
     "search.scores = scores.masked_fill(token == eos, -math.inf)  # (B, K)",
     "search.scores = scores  # (B, K)"),
    ("generate: the bound without the final length penalty", "inference/generate.py",
     "bound = search.scores.max(1).values / search.bound_lp",
     "bound = search.scores.max(1).values"),
    ("generate: the last of equal finished scores wins", "inference/generate.py",
     "better = score > self.best[sentence]  # strictly: the first of equal ones stays",
     "better = score >= self.best[sentence]  # strictly: the first of equal ones stays"),
    ("generate: min_len not enforced", "inference/generate.py",
     "    if t < min_len:\n        logp[:, :, eos_id] = -math.inf\n",
     "    if False:\n        logp[:, :, eos_id] = -math.inf\n"),
    ("generate: the cache not reordered along the beams", "inference/generate.py",
     "        stepper.reorder(rows.view(-1))", "        pass"),
    ("kv_cache: reorder keeps the old rows", "nn/kv_cache.py",
     "torch.index_select(past_k, 0, index, out=self.k[:, :, : self.length])",
     "self.k[:, :, : self.length] = past_k[: index.shape[0]]"),
    ("averaging: the sum instead of the mean", "inference/averaging.py",
     "return {k: (total[k] / n).to(v.dtype)", "return {k: total[k].to(v.dtype)"),
)


def _mutate(package: Path, module: str, old: str, new: str) -> None:
    path = package / module
    text = path.read_text(encoding="utf-8")
    count = text.count(old)
    if count != 1:
        raise SystemExit(f"mutation_run: error: {module}: the snippet {old[:60]!r} occurs "
                         f"{count} times (expected exactly once)")
    path.write_text(text.replace(old, new), encoding="utf-8")


def _run_tests(src: Path) -> tuple[bool, str, float]:
    """Whether the tests fail (the mutant is killed), the first failing test, seconds."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-m", "not slow",
                               "-p", "no:cacheprovider", "-p", "no:randomly", *TESTS],
                              cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=LIMIT_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        return True, "time limit", time.perf_counter() - start
    failed = [line.split(" ", 1)[1].split(" - ")[0] for line in done.stdout.splitlines()
              if line.startswith(("FAILED ", "ERROR "))]
    return done.returncode != 0, failed[0] if failed else "", time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help="run the mutants whose name has this")
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if args.only is None or args.only in m[0]]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        for _, module, old, _ in chosen:  # every snippet checked before any run
            if (ROOT / "src" / "transformer_book" / module).read_text("utf-8").count(old) != 1:
                _mutate(ROOT / "src" / "transformer_book", module, old, old)  # the refusal
        for name, module, old, new in chosen:
            shutil.rmtree(src, ignore_errors=True)
            shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
            _mutate(src / "transformer_book", module, old, new)
            killed, by, seconds = _run_tests(src)
            rows.append({"name": name, "module": module, "killed": killed, "by": by,
                         "seconds": round(seconds, 1)})
            print(f"{'killed' if killed else 'SURVIVED':>8}  {seconds:6.1f} s  {name}"
                  f"{'  (' + by + ')' if by else ''}", flush=True)
    survivors = [r["name"] for r in rows if not r["killed"]]
    print(f"{len(rows) - len(survivors)} of {len(rows)} mutants killed; survivors: "
          f"{survivors or 'none'}")
    path = write_record(args.results, "mutation", "core",
                        {"kind": "mutation", "cpu": cpu_name(), "git": git_commit(),
                         "tests": list(TESTS), "mutants": rows, "killed":
                         len(rows) - len(survivors), "survivors": survivors})
    print(f"record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
