"""How the command line shows and reads instants (pure: no database, no clock)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from celery_gaffer import cron, every
from celery_gaffer.cli.times import parse_instant, when, zone_of

UTC = timezone.utc
LONDON = zone_of(cron("30 2 * * *", "Europe/London"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-30 21:30", datetime(2026, 11, 30, 21, 30, tzinfo=UTC)),
        ("2026-11-30T21:30", datetime(2026, 11, 30, 21, 30, tzinfo=UTC)),
        ("2026-11-30T21:30:00", datetime(2026, 11, 30, 21, 30, tzinfo=UTC)),
        ("2026-11-30T21:30:15.250", datetime(2026, 11, 30, 21, 30, 15, 250000, tzinfo=UTC)),
        ("2026-11-30T21:30Z", datetime(2026, 11, 30, 21, 30, tzinfo=UTC)),
        ("2026-11-30 21:30+01:00", datetime(2026, 11, 30, 20, 30, tzinfo=UTC)),
        ("2026-11-30T21:30:00-05:00", datetime(2026, 12, 1, 2, 30, tzinfo=UTC)),
        ("2026-11-30", datetime(2026, 11, 30, tzinfo=UTC)),
        (" 2026-11-30 ", datetime(2026, 11, 30, tzinfo=UTC)),
    ],
)
def test_iso_times_with_or_without_seconds_and_offsets_are_read_as_utc(
    text: str, expected: datetime
) -> None:
    parsed = parse_instant(text)
    assert parsed == expected
    assert parsed.tzinfo is UTC


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("2026-11-30 9pm", "is not an ISO time such as 2026-11-30, 2026-11-30 21:30"),
        ("30/11/2026", "is not an ISO time"),
        ("2026-11-30T21", "is not an ISO time"),
        ("2026-11-30+01:00", "is not an ISO time"),
        ("", "is not an ISO time"),
        ("2026-02-30", "is not a valid time: day is out of range for month"),
        ("2026-11-30T25:00", "is not a valid time: hour must be in 0..23"),
    ],
)
def test_anything_else_is_refused_saying_what_is_accepted(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_instant(text)


def test_a_zoned_time_shows_the_zones_clock_next_to_utc_across_dst() -> None:
    assert (
        when(datetime(2026, 11, 30, 2, 30, tzinfo=UTC), LONDON) == "2026-11-30 02:30 GMT (02:30Z)"
    )
    assert when(datetime(2027, 3, 28, 2, 30, tzinfo=UTC), LONDON) == "2027-03-28 03:30 BST (02:30Z)"
    tokyo = zone_of(cron("0 * * * *", "Asia/Tokyo"))
    # The UTC date is shown when it differs; seconds only when they are not zero.
    assert (
        when(datetime(2026, 11, 30, 23, 30, 5, tzinfo=UTC), tokyo)
        == "2026-12-01 08:30:05 JST (2026-11-30 23:30:05Z)"
    )


def test_utc_every_and_missing_times_are_plain_utc() -> None:
    assert zone_of(cron("30 2 * * *")) is None
    assert zone_of(cron("30 2 * * *", "Etc/UTC")) is None
    assert zone_of(every(60)) is None
    assert zone_of(None) is None
    assert when(datetime(2026, 11, 30, 2, 30, tzinfo=UTC)) == "2026-11-30 02:30:00Z"
    assert when(None, LONDON) == "-"
