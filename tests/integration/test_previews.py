"""Previews (``ScheduleStore.preview_*``) against real SQLite files and PostgreSQL and a
real Redis broker: each says what the real operation then does, and writes nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import select

from celery_gaffer import GafferError, Scheduler, ScheduleStore, cron, every
from celery_gaffer.exceptions import InvalidInput, ScheduleNotFound
from celery_gaffer.schedule_store import Preview
from celery_gaffer.schedules.preview import fires_from
from celery_gaffer.store import database_for

from ..support import FrozenClock, message_headers, noop_app

UTC = timezone.utc


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    with noop_app("preview-test", database_url, redis_url) as app:
        yield app


@pytest.fixture
def store(app: Celery, clock: FrozenClock) -> ScheduleStore:
    return ScheduleStore(app, clock=clock)


def database_rows(app: Celery) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every row of the schedules table and of the ledger, to compare before and after."""
    database = database_for(app)
    models = database.models
    with database.read() as conn:
        schedules = conn.execute(select(models.Schedule).order_by(models.Schedule.name))
        fires = conn.execute(select(models.Fire).order_by(models.Fire.id))
        return [tuple(row) for row in schedules], [tuple(row) for row in fires]


def nominals_sent(redis_url: str) -> list[datetime]:
    return [
        datetime.strptime(h["gaffer_nominal_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        for h in message_headers(redis_url)
    ]


def writes_nothing(app: Celery, preview: Callable[[], Preview]) -> Preview:
    before = database_rows(app)
    result = preview()
    assert database_rows(app) == before
    return result


# -- resume -----------------------------------------------------------------------------


def test_preview_resume_says_the_next_fire_and_the_paused_fires_resume_does_not_send(
    app: Celery, store: ScheduleStore, clock: FrozenClock, redis_url: str
) -> None:
    store.add("nightly", "t.noop", cron("30 1 * * *", "Europe/London"))
    store.pause("nightly")
    clock.advance(41 * 86400)  # 2026-07-12 12:00Z: 41 fires (02 June ... 12 July) paused

    preview = writes_nothing(app, lambda: store.preview_resume("nightly"))
    assert preview.summary == (
        "resuming sends nothing now: the next fire is 2026-07-13 01:30 BST (00:30Z); "
        "41 fires while paused are not sent"
    )
    assert preview.skipped == 41

    resumed = store.resume("nightly")
    assert resumed.schedule is not None
    assert preview.fires == fires_from(resumed.schedule, resumed.next_fire_at, 5)
    assert preview.fires[0] == resumed.next_fire_at == datetime(2026, 7, 13, 0, 30, tzinfo=UTC)
    # Beat sends none of the 41 paused fires, then the previewed next fire at its time.
    beat = Scheduler(app, clock=clock)
    beat.tick()
    assert nominals_sent(redis_url) == []
    clock.now = preview.fires[0]
    beat.tick()
    assert nominals_sent(redis_url) == [preview.fires[0]]


def test_preview_resume_of_a_running_schedule_says_it_changes_nothing(
    app: Celery, store: ScheduleStore
) -> None:
    added = store.add("poll", "t.noop", every(3600))
    preview = writes_nothing(app, lambda: store.preview_resume("poll"))
    assert preview == Preview(
        "poll is not paused: resuming changes nothing; the next fire is 2026-06-01 13:00:00Z",
        [datetime(2026, 6, 1, 13 + h, tzinfo=UTC) for h in range(5)],
        0,
    )
    assert store.resume("poll") == added


def test_preview_resume_of_a_schedule_in_error_refuses_or_clears_as_resume_does(
    app: Celery, clock: FrozenClock
) -> None:
    app.conf.beat_schedule = {"late": {"task": "t.later", "schedule": every(3600)}}
    Scheduler(app, clock=clock)  # stores the entry in error: t.later is not registered
    store = ScheduleStore(app, clock=clock)
    with pytest.raises(InvalidInput) as real:
        store.resume("late")
    with pytest.raises(InvalidInput) as previewed:
        writes_nothing(app, lambda: store.preview_resume("late"))
    assert str(previewed.value) == str(real.value)
    assert "still in error" in str(real.value)

    @app.task(name="t.later", shared=False)
    def later() -> None:
        return None

    clock.advance(3 * 3600 + 60)
    preview = writes_nothing(app, lambda: store.preview_resume("late"))
    assert preview.summary == (
        "resuming clears the error and sends nothing now: the next fire is "
        "2026-06-01 16:00:00Z; 3 fires while in error are not sent"
    )
    resumed = store.resume("late")
    assert resumed.error is None
    assert (preview.fires[0], preview.skipped) == (resumed.next_fire_at, 3)


def test_preview_resume_of_an_unknown_name_raises_as_resume_does(store: ScheduleStore) -> None:
    with pytest.raises(ScheduleNotFound, match="no schedule named 'nope'"):
        store.preview_resume("nope")


# -- backfill ---------------------------------------------------------------------------


def test_preview_backfill_lists_the_fires_backfill_sends_and_counts_the_ledger(
    app: Celery, store: ScheduleStore, clock: FrozenClock, redis_url: str
) -> None:
    store.add("b", "t.noop", every(3600))
    start = clock.now - timedelta(hours=5)
    store.backfill("b", start, clock.now - timedelta(hours=2))  # 08:00, 09:00, 10:00
    Scheduler(app, clock=clock).tick()  # Beat sends nothing yet: the next fire is 13:00
    sent_before = len(message_headers(redis_url))

    preview = writes_nothing(app, lambda: store.preview_backfill("b", start, clock.now))
    assert preview == Preview(
        "backfill sends 2 fires (2026-06-01 11:00:00Z ... 2026-06-01 12:00:00Z); "
        "3 are already in the ledger",
        [datetime(2026, 6, 1, 11, tzinfo=UTC), datetime(2026, 6, 1, 12, tzinfo=UTC)],
        3,
    )
    report = store.backfill("b", start, clock.now)
    assert (report.sent, report.already) == (len(preview.fires), preview.skipped)
    assert nominals_sent(redis_url)[sent_before:] == preview.fires

    again = writes_nothing(app, lambda: store.preview_backfill("b", start, clock.now))
    assert again == Preview(
        "backfill sends nothing: the range's 5 fires are in the ledger already", [], 5
    )
    assert store.backfill("b", start, clock.now).sent == 0


def test_preview_backfill_of_a_long_range_lists_the_first_twenty_in_the_zone(
    app: Celery, store: ScheduleStore, clock: FrozenClock, redis_url: str
) -> None:
    # Every 15 minutes on London's clock, over 2 days: 192 fires, none in the ledger.
    store.add("q", "t.noop", cron("*/15 * * * *", "Europe/London"))
    start, end = clock.now - timedelta(days=2), clock.now
    preview = writes_nothing(app, lambda: store.preview_backfill("q", start, end))
    assert preview.summary == (
        "backfill sends 192 fires (2026-05-30 13:15 BST (12:15Z) ... "
        "2026-06-01 13:00 BST (12:00Z)); none is already in the ledger"
    )
    assert (len(preview.fires), preview.skipped) == (20, 0)
    report = store.backfill("q", start, end)
    assert (report.sent, report.already) == (192, 0)
    assert nominals_sent(redis_url)[:20] == preview.fires


def _same_error(app: Celery, real: Callable[[], object], preview: Callable[[], Preview]) -> str:
    before = database_rows(app)
    with pytest.raises(GafferError) as previewed:
        preview()
    with pytest.raises(GafferError) as done:
        real()
    assert (type(previewed.value), str(previewed.value), previewed.value.field) == (
        type(done.value),
        str(done.value),
        done.value.field,
    )
    assert database_rows(app) == before
    return str(done.value)


@pytest.mark.parametrize(
    ("name", "start", "end", "limit", "words"),
    [
        ("b", timedelta(hours=-5), timedelta(hours=1), 10_000, "past only"),
        ("b", timedelta(hours=-5), timedelta(0), 3, "more than 3 fires"),
        ("b", None, timedelta(0), 10_000, "timezone-aware"),
        ("nope", timedelta(hours=-5), timedelta(0), 10_000, "no schedule named 'nope'"),
    ],
)
def test_preview_backfill_refuses_what_backfill_refuses(
    app: Celery,
    store: ScheduleStore,
    clock: FrozenClock,
    name: str,
    start: timedelta | None,
    end: timedelta,
    limit: int,
    words: str,
) -> None:
    store.add("b", "t.noop", every(3600))
    after = clock.now.replace(tzinfo=None) if start is None else clock.now + start
    until = clock.now + end
    message = _same_error(
        app,
        lambda: store.backfill(name, after, until, limit=limit),
        lambda: store.preview_backfill(name, after, until, limit=limit),
    )
    assert words in message


# -- update -----------------------------------------------------------------------------


def test_preview_update_of_the_timing_gives_the_fires_after_the_edit(
    app: Celery, store: ScheduleStore, redis_url: str, clock: FrozenClock
) -> None:
    store.add("nightly", "t.noop", cron("30 2 * * *"))
    preview = writes_nothing(app, lambda: store.preview_update("nightly", tz="Europe/London"))
    assert preview.summary == (
        "after the edit: cron '30 2 * * *' Europe/London (a new timing: it starts from now); "
        "next fire 2026-06-02 02:30 BST (01:30Z)"
    )
    assert preview.skipped == 0
    after = store.update("nightly", tz="Europe/London")
    assert after.schedule is not None
    assert preview.fires == fires_from(after.schedule, after.next_fire_at, 5)
    assert preview.fires[0] == after.next_fire_at
    beat = Scheduler(app, clock=clock)
    for fire in preview.fires[:2]:
        clock.now = fire
        beat.tick()
    assert nominals_sent(redis_url) == preview.fires[:2]


def test_preview_update_with_the_same_timing_keeps_the_backlog(
    app: Celery, store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add("poll", "t.noop", every(3600))
    clock.advance(3 * 3600 + 60)  # Beat did not run: 13:00, 14:00, 15:00 are still due
    preview = writes_nothing(
        app, lambda: store.preview_update("poll", every=3600, gaffer={"grace": 60})
    )
    assert preview.summary == "after the edit: every 3600s; next fire 2026-06-01 13:00:00Z"
    after = store.update("poll", every=3600, gaffer={"grace": 60})
    assert preview.fires[0] == after.next_fire_at == datetime(2026, 6, 1, 13, tzinfo=UTC)


def test_preview_update_of_a_paused_schedule_says_it_stays_paused(
    app: Celery, store: ScheduleStore
) -> None:
    store.add("poll", "t.noop", every(3600))
    store.pause("poll")
    preview = writes_nothing(app, lambda: store.preview_update("poll", every=60))
    assert preview == Preview(
        "after the edit: every 60s (a new timing: it starts from now); "
        "paused: it fires again after resume",
        [],
        0,
    )
    assert store.update("poll", every=60).next_fire_at is None


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"cron": "61 * * * *"}, "expr"),
        ({"cron": "0 3 * * *", "tz": "Mars/Olympus"}, "not a known IANA zone"),
        ({"tz": "Europe/London"}, "a zone applies only to a cron schedule"),
        ({"task": "t.unknown"}, "task"),
        ({"cron": "0 3 * * *", "every": 60}, "only one of"),
        ({"gaffer": {"enabled": False}}, "pause or resume"),
        ({"colour": "red"}, "not an editable field"),
        ({"jitter": 7200}, "jitter"),
    ],
)
def test_preview_update_refuses_what_update_refuses(
    app: Celery, store: ScheduleStore, changes: dict[str, Any], words: str
) -> None:
    store.add("poll", "t.noop", every(3600))
    message = _same_error(
        app,
        lambda: store.update("poll", **changes),
        lambda: store.preview_update("poll", **changes),
    )
    assert words in message


def test_preview_update_of_an_unknown_name_raises_as_update_does(app: Celery) -> None:
    store = ScheduleStore(app)
    message = _same_error(
        app,
        lambda: store.update("nope", tz="UTC"),
        lambda: store.preview_update("nope", tz="UTC"),
    )
    assert "no schedule named 'nope'" in message
