"""Where a run stands, as a checkpoint's ``extra`` records it (train.resume.RunState)."""

from __future__ import annotations

import pytest

from transformer_book.train.resume import RunState


def _extra(**where):
    return {"epoch": 2, "losses": [{"step": 1, "loss": 3.0}], "evals": [], **where}


def test_a_checkpoint_records_the_steps_taken_in_its_epoch():
    state = RunState.from_extra({**_extra(steps_into_epoch=5), "train_seconds": 7}, 4)
    assert state == RunState(epoch=2, steps_into_epoch=5, losses=[{"step": 1, "loss": 3.0}],
                             evals=[], train_seconds=7.0)
    assert isinstance(state.train_seconds, float), "seconds, whatever JSON gave back"


@pytest.mark.parametrize(("position", "accumulation", "steps"), [
    (0, 1, 0), (6, 1, 6), (6, 2, 3), (8, 4, 2),
    (7, 2, 4),  # the epoch's last step took one micro-batch: the epoch is done
])
def test_older_checkpoints_counted_micro_batches(position, accumulation, steps):
    """Before ``steps_into_epoch``, ``position`` counted the epoch's micro-batches: every
    step took ``accumulation`` of them but the epoch's last, which may take fewer."""
    state = RunState.from_extra(_extra(position=position), accumulation)
    assert state.steps_into_epoch == steps and state.train_seconds == 0.0


def test_the_record_is_copied_not_shared():
    extra = _extra(steps_into_epoch=1)
    state = RunState.from_extra(extra, 1)
    state.losses.append({"step": 2, "loss": 2.5})
    assert len(extra["losses"]) == 1, "the loop appends to its own list"
