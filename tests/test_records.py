"""read_records reads back what write_record wrote, oldest first, with the time it was written."""

import json
import math
import os
from datetime import datetime, timezone

import pytest

from transformer_book.util import records
from transformer_book.util.records import read_records, write_record
from transformer_book.util.validation import BookError


def test_read_records_returns_each_kind_oldest_first_with_its_time(tmp_path, monkeypatch):
    stamps = iter(["20261201T174727Z", "20261129T232615Z", "20261129T232615Z", "20261130T000000Z"])
    monkeypatch.setattr(records, "utc_timestamp", lambda: next(stamps))
    write_record(tmp_path, "train", "small", {"steps": 4878})
    write_record(tmp_path, "train", "small", {"steps": 2108})
    write_record(tmp_path, "train", "small", {"steps": 2109})  # same second: "-1" appended
    write_record(tmp_path, "evaluate", "small-test_2016_flickr", {"bleu": 39.08})

    train = read_records(tmp_path, "train")
    assert [r["steps"] for r in train] == [2108, 2109, 4878]
    assert train[0]["written"] == datetime(2026, 11, 29, 23, 26, 15, tzinfo=timezone.utc)
    assert [r["bleu"] for r in read_records(tmp_path, "evaluate")] == [39.08]
    assert read_records(tmp_path / "missing", "train") == []


def test_read_records_refuses_a_file_name_without_a_time(tmp_path):
    (tmp_path / "train-small.json").write_text("{}")
    with pytest.raises(BookError, match=r"results_dir: expected record files named "
                                         r"train-<name>-<UTC time>.json.*train-small.json"):
        read_records(tmp_path, "train")


def test_a_record_is_strict_json_readable_as_the_umask_allows(tmp_path):
    previous = os.umask(0o022)
    try:
        path = write_record(tmp_path, "train", "tiny", {"loss": math.nan, "steps": [1, math.inf]})
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o644
    assert json.loads(path.read_text()) == {"loss": None, "steps": [1, None]}
    with pytest.raises(BookError, match=r"record: expected a dict, received list"):
        write_record(tmp_path, "train", "tiny", [1])  # type: ignore[arg-type]
