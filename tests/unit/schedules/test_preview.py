"""The wording and limits of previews (pure: no database; the integration tests check
each preview against the real operation)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from celery_gaffer import cron, every
from celery_gaffer.exceptions import InvalidInput
from celery_gaffer.schedules.preview import (
    COUNT_LIMIT,
    LISTED_FIRES,
    Preview,
    backfill_nominals,
    backfill_preview,
    count_fires,
    resume_preview,
    update_preview,
)

UTC = timezone.utc
NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def test_a_preview_is_frozen() -> None:
    preview = Preview("s", [], 0)
    with pytest.raises(AttributeError):
        preview.skipped = 1  # type: ignore[misc]


def test_resume_counts_one_fire_in_the_singular_and_a_huge_pause_as_more_than_the_limit() -> None:
    minutely = cron("* * * * *")
    one = resume_preview(
        "m", minutely, paused=True, in_error=False, next_fire=NOW, skipped=1
    ).summary
    assert one.endswith("; 1 fire while paused is not sent")
    skipped = count_fires(minutely, NOW - timedelta(days=365), NOW)
    assert skipped == COUNT_LIMIT + 1  # counting stops there
    huge = resume_preview(
        "m", minutely, paused=True, in_error=False, next_fire=NOW, skipped=skipped
    )
    assert huge.summary.endswith("; more than 100,000 fires while paused are not sent")
    assert count_fires(every(60), NOW - timedelta(hours=1), NOW) == 60


def test_resume_of_a_schedule_without_a_next_fire_says_so() -> None:
    preview = resume_preview("x", None, paused=True, in_error=False, next_fire=None, skipped=0)
    assert preview == Preview(
        "resuming sends nothing now: no fire to come; no fire fell while paused", [], 0
    )


def test_backfill_of_an_empty_range_and_of_one_fire() -> None:
    hourly = every(3600)
    start, end = NOW - timedelta(minutes=30), NOW - timedelta(minutes=1)
    assert backfill_preview("h", hourly, start, end, [], 0).summary == (
        "backfill sends nothing: h has no fire in (2026-12-01 11:30:00Z, 2026-12-01 11:59:00Z]"
    )
    one = backfill_preview("h", hourly, start, NOW, [NOW], 1)
    assert one.summary == (
        "backfill sends 1 fire (2026-12-01 12:00:00Z); 1 is already in the ledger"
    )


def test_backfill_lists_at_most_the_first_twenty_fires() -> None:
    fires = backfill_nominals(every(60), NOW - timedelta(hours=1), NOW, NOW, limit=60)
    preview = backfill_preview("m", every(60), NOW - timedelta(hours=1), NOW, fires, 0)
    assert preview.fires == fires[:LISTED_FIRES]
    assert preview.summary.startswith("backfill sends 60 fires (2026-12-01 11:01:00Z ... ")
    with pytest.raises(InvalidInput, match="more than 59 fires"):
        backfill_nominals(every(60), NOW - timedelta(hours=1), NOW, NOW, limit=59)


def test_update_shows_the_zone_and_the_next_fires() -> None:
    nightly = cron("30 1 * * *", "Europe/London")
    first = nightly.next_after(NOW)
    preview = update_preview(nightly, enabled=True, next_fire=first, new_timing=False)
    assert preview.summary == (
        "after the edit: cron '30 1 * * *' Europe/London; next fire 2026-12-02 01:30 GMT (01:30Z)"
    )
    assert len(preview.fires) == 5
    assert preview.fires[1] == datetime(2026, 12, 3, 1, 30, tzinfo=UTC)
