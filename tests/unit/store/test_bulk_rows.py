"""A bulk load's rows: JSON made once, as text identical to what a plain row stores, and
chunks validated an entry at a time with their errors kept for later."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from celery_gaffer import InvalidInput, InvalidSchedule, cron, every
from celery_gaffer.schedules.spec import json_text, json_value, validate_entry
from celery_gaffer.store.copying import JSONText, decoded
from celery_gaffer.store.schedule_bulk import ChunkRows
from celery_gaffer.store.schedule_rows import Timings, columns

NOW = datetime(2026, 12, 5, 1, 2, 3, tzinfo=timezone.utc)
JSON_COLUMNS = ("schedule", "args", "kwargs", "options")

plain = st.one_of(st.none(), st.booleans(), st.integers(), st.text(), st.floats(allow_nan=False))
values = st.recursive(
    plain,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.one_of(st.text(), st.integers(), st.booleans()), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(st.one_of(st.lists(values, max_size=5), st.dictionaries(st.text(), values, max_size=5)))
def test_the_kept_text_is_what_json_dumps_makes_of_the_kept_value(value: Any) -> None:
    try:
        kept, text = json_text(value, "kwargs")
    except InvalidInput:
        return
    assert kept == json_value(value, "kwargs")
    if text is not None:
        assert text == json.dumps(kept)


def test_keys_that_merge_leave_no_text() -> None:
    kept, text = json_text({1: "a", "1": "b"}, "kwargs")
    assert kept == {"1": "b"}
    assert text is None


def test_a_backslash_u_in_a_string_is_no_nul() -> None:
    assert json_text({"k": "\\u0000 \\ud800"}, "kwargs") == (
        {"k": "\\u0000 \\ud800"},
        json.dumps({"k": "\\u0000 \\ud800"}),
    )
    with pytest.raises(InvalidInput):
        json_text({"k": "a\x00"}, "kwargs")
    assert json_text(["\U0001f600"], "args")[0] == ["\U0001f600"]


@pytest.mark.parametrize(
    "entry",
    [
        {"schedule": every(60), "kwargs": {"tenant": 7}},
        {"schedule": cron("0 3 * * *", "Asia/Tokyo"), "args": [1, "ü"], "options": {"queue": "q"}},
        {
            "schedule": every(90),
            "kwargs": {"nested": {"a": [1, 2.5]}},
            "gaffer": {"enabled": False},
        },
        {"schedule": every(30), "kwargs": {1: "a", "1": "b"}},
    ],
)
def test_bulk_rows_hold_the_very_json_a_plain_row_stores(entry: dict[str, Any]) -> None:
    spec = validate_entry(name="n", task="t", **entry)
    plain_row = columns(spec, NOW, NOW)
    bulk_row = columns(spec, NOW, NOW, 0, Timings())
    for name in JSON_COLUMNS:
        assert type(bulk_row[name]) is JSONText
        assert bulk_row[name] == json.dumps(plain_row[name])
        assert decoded(bulk_row[name]) == plain_row[name]
    assert {k: v for k, v in bulk_row.items() if k not in JSON_COLUMNS} == {
        k: v for k, v in plain_row.items() if k not in JSON_COLUMNS
    }


def test_timings_serialise_a_shared_timing_once() -> None:
    timings = Timings()
    shared = every(60)
    one = columns(validate_entry(name="a", task="t", schedule=shared), NOW, NOW, 0, timings)
    two = columns(validate_entry(name="b", task="t", schedule=every(60)), NOW, NOW, 0, timings)
    assert one["schedule"] is two["schedule"]


def build(entry: Any) -> dict[str, Any]:
    if entry == "bad":
        raise InvalidSchedule("schedule: nonsense", field="schedule")
    if entry == "bug":
        raise KeyError(entry)
    return {"name": entry}


def test_a_chunk_takes_at_most_its_size_one_entry_a_step() -> None:
    entries = iter(["a", "b", "c"])
    chunk = ChunkRows(entries, 2, 0, build)
    chunk.step()
    assert chunk.rows == [{"name": "a"}]
    assert chunk.validated() == [{"name": "a"}, {"name": "b"}]
    chunk.step()  # a chunk that is full reads nothing more
    assert ChunkRows(entries, 2, 2, build).validated() == [{"name": "c"}]
    assert ChunkRows(entries, 2, 3, build).validated() == []


def test_a_bad_entry_is_raised_by_validated_only_naming_its_position() -> None:
    chunk = ChunkRows(iter(["a", "bad", "c"]), 5, 10, build)
    for _ in range(5):
        chunk.step()  # never raises: the chunk before may be streaming
    assert chunk.rows == [{"name": "a"}]
    with pytest.raises(InvalidSchedule) as caught:
        chunk.validated()
    assert str(caught.value) == ("entry 11: schedule: nonsense (10 schedules were added before it)")
    assert caught.value.field == "schedule"
    assert isinstance(caught.value.__cause__, InvalidSchedule)


def test_other_errors_and_the_iterators_own_are_raised_as_they_are() -> None:
    with pytest.raises(KeyError):
        ChunkRows(iter(["a", "bug"]), 5, 0, build).validated()

    def failing() -> Iterator[str]:
        yield "a"
        raise InvalidInput("source: unreadable")

    chunk = ChunkRows(failing(), 5, 0, build)
    chunk.step()
    chunk.step()
    with pytest.raises(InvalidInput, match=r"^source: unreadable$"):
        chunk.validated()


def test_the_bulk_columns_are_the_schedule_tables_and_its_defaults_the_models() -> None:
    """The COPY path writes exactly the columns it names: a column added to the table
    and not to the bulk list would be written by a plain insert and lost by COPY."""
    from celery_gaffer.store import schedule_bulk
    from celery_gaffer.store.models import models_for, table_of

    table = table_of(models_for("gaffer_").Schedule)
    assert set(schedule_bulk._NAMES) == {column.name for column in table.columns} - {"id"}
    for name, value in schedule_bulk._INSERT_DEFAULTS.items():
        default = table.c[name].default
        assert default is not None, name
        assert default.arg == value, name
    spec = validate_entry(name="n", task="t", schedule=every(60))
    assert set(columns(spec, NOW, NOW, 0, Timings())) <= set(schedule_bulk._NAMES)
