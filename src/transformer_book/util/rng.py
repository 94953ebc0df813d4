"""Every random generator's state, as JSON: what a checkpoint stores so that a resumed run
draws the same dropout masks and batch orders as an uninterrupted one.

:mod:`transformer_book.run.checkpoint` writes :func:`capture_rng_state` into ``rng.json``
and :mod:`transformer_book.train.resume` puts it back with :func:`restore_rng_state`.
"""

from __future__ import annotations

import base64
import random
from typing import Any

import numpy as np
import torch

from transformer_book.util.validation import require

__all__ = ["capture_rng_state", "restore_rng_state"]


def _encode_bytes(tensor: torch.Tensor) -> str:
    return base64.b64encode(tensor.cpu().numpy().tobytes()).decode("ascii")


def _decode_bytes(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8).clone()


def capture_rng_state() -> dict[str, Any]:
    """Every random generator's state as a JSON-serialisable dict.

    Keys: ``torch`` (CPU generator, base64 bytes), ``cuda`` (one per visible GPU, base64;
    empty without CUDA), ``python`` (:mod:`random`), ``numpy`` (legacy global generator).
    :func:`restore_rng_state` puts them back, so a resumed run draws the same dropout masks
    and batch orders as an uninterrupted one.
    """
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state(legacy=True)  # noqa: NPY002 (the global one set_seed seeds)
    assert isinstance(np_state, tuple), f"legacy numpy state is a tuple, got {type(np_state)}"
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np_state
    cuda = []
    if torch.cuda.is_available():
        cuda = [_encode_bytes(state) for state in torch.cuda.get_rng_state_all()]
    return {
        "torch": _encode_bytes(torch.get_rng_state()),
        "cuda": cuda,
        "python": {"version": version, "state": list(internal), "gauss_next": gauss},
        "numpy": {"kind": np_kind, "keys": np_keys.tolist(), "pos": int(np_pos),
                  "has_gauss": int(np_has_gauss), "cached_gaussian": float(np_gauss)},
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state` (CUDA states are restored when GPUs exist)."""
    require(isinstance(state, dict) and {"torch", "python", "numpy"} <= set(state), "state",
            "a dict from capture_rng_state() with keys torch, python, numpy",
            sorted(state) if isinstance(state, dict) else type(state).__name__)
    torch.set_rng_state(_decode_bytes(state["torch"]))
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([_decode_bytes(s) for s in cuda])
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss_next"]))
    npy = state["numpy"]
    numpy_state = (npy["kind"], np.array(npy["keys"], dtype=np.uint32), npy["pos"],
                   npy["has_gauss"], npy["cached_gaussian"])
    np.random.set_state(numpy_state)  # noqa: NPY002 (the global generator set_seed seeds)
