"""The pure part of the weekly partitions: weeks, names and bounds as PostgreSQL prints them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from celery_gaffer.store.partitions import (
    WEEK,
    Partition,
    _overlaps,
    ahead,
    parse_bound,
    period_name,
    period_start,
    periods,
)

UTC = timezone.utc


@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1)))
def test_a_moment_is_in_the_week_that_starts_on_the_monday_before_it(naive: datetime) -> None:
    at = naive.replace(tzinfo=UTC)
    start = period_start(at, WEEK)
    assert start <= at < start + WEEK
    assert (start.weekday(), start.hour, start.minute, start.second, start.microsecond) == (
        0, 0, 0, 0, 0,
    )  # fmt: skip
    day, hour = period_start(at, timedelta(days=1)), period_start(at, timedelta(hours=1))
    assert day <= at < day + timedelta(days=1)
    assert (day.hour, day.minute) == (0, 0)
    assert hour <= at < hour + timedelta(hours=1)
    assert (hour.minute, hour.second) == (0, 0)


def test_week_start_reads_the_instant_not_the_wall_clock() -> None:
    # Monday 01:00 in Berlin is Sunday 23:00 UTC: the week of the Monday before.
    berlin = timezone(timedelta(hours=2))
    monday_in_berlin = datetime(2026, 6, 1, 1, 0, tzinfo=berlin)
    assert period_start(monday_in_berlin, WEEK) == datetime(2026, 5, 25, tzinfo=UTC)


def test_periods_lists_each_period_that_holds_a_moment_of_the_span() -> None:
    found = periods(datetime(2026, 12, 2, tzinfo=UTC), datetime(2026, 12, 16, tzinfo=UTC), WEEK)
    assert found == [datetime(2026, 11, 30, tzinfo=UTC), datetime(2026, 12, 7, tzinfo=UTC),
                     datetime(2026, 12, 14, tzinfo=UTC)]  # fmt: skip
    assert period_name("gaffer_fires", found[0], WEEK) == "gaffer_fires_p20261130"
    hour = timedelta(hours=1)
    at = datetime(2026, 12, 2, 7, 30, tzinfo=UTC)
    assert periods(at, at + hour, hour) == [at.replace(minute=0), at.replace(hour=8, minute=0)]
    assert period_name("gaffer_fires", at.replace(minute=0), hour) == "gaffer_fires_p202612020700"


def test_periods_are_made_two_ahead_and_never_less_than_six_hours() -> None:
    assert ahead(WEEK) == 2 * WEEK
    assert ahead(timedelta(hours=1)) == timedelta(hours=6)


@pytest.mark.parametrize(
    ("printed", "expected"),
    [
        (
            "FOR VALUES FROM ('2026-11-30 00:00:00+00') TO ('2026-12-07 00:00:00+00')",
            (datetime(2026, 11, 30, tzinfo=UTC), datetime(2026, 12, 7, tzinfo=UTC)),
        ),
        (
            "FOR VALUES FROM (MINVALUE) TO ('2026-12-07 00:00:00+00')",
            (None, datetime(2026, 12, 7, tzinfo=UTC)),
        ),
        (
            "FOR VALUES FROM ('2026-11-30 01:00:00+01') TO (MAXVALUE)",
            (datetime(2026, 11, 30, tzinfo=UTC), None),
        ),
        ("DEFAULT", (None, None)),
    ],
)
def test_bounds_are_read_as_postgresql_prints_them(
    printed: str, expected: tuple[datetime | None, datetime | None]
) -> None:
    assert parse_bound(printed) == expected


def test_a_bound_of_another_form_is_refused() -> None:
    with pytest.raises(ValueError, match="unexpected partition bound"):
        parse_bound("FOR VALUES IN (1, 2)")


def test_a_new_week_overlaps_the_history_below_it_and_never_the_default() -> None:
    monday = datetime(2026, 11, 30, tzinfo=UTC)
    history = Partition("h", None, monday + WEEK)
    assert _overlaps(history, monday, monday + WEEK)
    assert not _overlaps(history, monday + WEEK, monday + 2 * WEEK)
    assert not _overlaps(Partition("d", None, None), monday, monday + WEEK)
