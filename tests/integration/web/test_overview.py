"""The console's overview over HTTP: counts by state, the Beats and the banner, the
fires and runs per minute, and the next clock change among the zones in use."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from celery import Celery
from sqlalchemy import update

from celery_gaffer import ScheduleStore, cron, every
from celery_gaffer.store import database_for
from celery_gaffer.store.beats import heartbeat
from celery_gaffer.store.models import table_of
from celery_gaffer.web import create_app
from celery_gaffer.web.overview import BEAT_QUIET, Kept, next_clock_change, read_overview

from ...support import FrozenClock
from .conftest import TOKEN, Client, insert_fire, insert_run

UTC = timezone.utc


def set_row(app: Celery, name: str, **values: object) -> None:
    database = database_for(app)
    table = table_of(database.models.Schedule)
    with database.begin() as conn:
        conn.execute(update(table).where(table.c.name == name).values(**values))


def beat_ticked(app: Celery, name: str, at: datetime) -> None:
    database = database_for(app)
    with database.begin() as conn:
        heartbeat(
            conn,
            database.models,
            name=name,
            host=name.split(":")[0],
            pid=4242,
            started_at=at - timedelta(hours=1),
            now=at,
        )


def test_the_overview_api_has_exactly_the_agreed_keys_and_counts_every_state(
    celery_app: Celery, client: Client, store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add_many(
        {"name": f"fine-{i}", "task": "t.noop", "schedule": every(3600)} for i in range(3)
    )
    store.add("resting", "t.noop", every(60))
    store.pause("resting")
    store.add("broken", "t.noop", every(60))
    set_row(celery_app, "broken", error="task t.gone is not registered")
    store.add("flaky", "t.noop", every(3600))
    set_row(
        celery_app,
        "flaky",
        health="failing",
        consecutive_failures=3,
        check_at=clock() + timedelta(hours=1),
    )
    body = client.get("/api/overview").json()
    assert {"counts", "beats", "next_clock_change"} <= set(body)
    assert body["counts"] == {"ok": 3, "late": 0, "failing": 1, "paused": 1, "error": 1}
    assert body["beats"] == []
    assert body["next_clock_change"] is None  # no cron schedule: no zone in use


def test_a_row_beat_has_not_rechecked_is_evaluated_live(
    celery_app: Celery, client: Client, store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add("minutely", "t.noop", every(60))
    beat_ticked(celery_app, "beat-host:1", clock())
    # Ten minutes on, no fire was sent: its check_at has passed and Beat left it.
    set_row(celery_app, "minutely", check_at=clock() + timedelta(seconds=30))
    clock.advance(600)
    beat_ticked(celery_app, "beat-host:1", clock())
    body = client.get("/api/overview").json()
    assert body["counts"]["late"] == 1
    assert body["counts"]["ok"] == 0
    assert body["estimated"] == 0


def test_beats_are_listed_with_host_last_tick_and_how_far_behind(
    celery_app: Celery, client: Client, clock: FrozenClock
) -> None:
    beat_ticked(celery_app, "alpha:11", clock() - timedelta(seconds=5))
    beat_ticked(celery_app, "beta:12", clock() - timedelta(seconds=300))
    body = client.get("/api/overview").json()
    assert [(b["name"], b["host"]) for b in body["beats"]] == [
        ("alpha:11", "alpha"),
        ("beta:12", "beta"),
    ]
    assert body["beats"][0]["last_tick_at"] == "2026-06-01T11:59:55Z"
    assert body["beats"][0]["behind_seconds"] == 5
    assert body["beats"][1]["behind_seconds"] == 300
    assert body["beat_down"] is False
    page = client.get("/").text
    assert 'role="alert"' not in page
    assert 'data-beat="alpha:11"' in page


def test_the_banner_shows_when_no_beat_ticked_within_the_quiet_time(
    celery_app: Celery, client: Client, clock: FrozenClock
) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert 'role="alert"' in page.text
    assert "No Beat is running" in page.text
    beat_ticked(celery_app, "alpha:11", clock() - timedelta(seconds=BEAT_QUIET + 1))
    assert client.get("/api/overview").json()["beat_down"] is True
    assert f"No Beat has ticked in the last {BEAT_QUIET:.0f} seconds" in client.get("/").text
    beat_ticked(celery_app, "alpha:11", clock() - timedelta(seconds=BEAT_QUIET))
    assert client.get("/api/overview").json()["beat_down"] is False
    assert 'role="alert"' not in client.get("/").text


def test_stale_rows_past_the_evaluated_ones_count_as_late_only_when_no_beat_runs(
    celery_app: Celery, store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add_many({"name": f"s{i}", "task": "t.noop", "schedule": every(60)} for i in range(4))
    database = database_for(celery_app)
    table = table_of(database.models.Schedule)
    with database.begin() as conn:
        conn.execute(update(table).values(check_at=clock() + timedelta(seconds=30)))
    clock.advance(600)
    console = create_app(celery_app, token=TOKEN, clock=clock).state.console
    down = read_overview(console, Kept(background=False), stale_limit=1)
    assert down.beat_down is True
    assert (down.counts["late"], down.counts["ok"], down.estimated) == (4, 0, 3)
    beat_ticked(celery_app, "alpha:11", clock())
    up = read_overview(console, Kept(background=False), stale_limit=1)
    # One evaluated (late); the three others under the word Beat stored until it re-checks.
    assert (up.counts["late"], up.counts["ok"], up.estimated) == (1, 3, 3)


def test_fires_and_runs_are_counted_per_minute_over_the_hour_and_per_15_minutes_over_the_day(
    celery_app: Celery, client: Client, store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add("job", "t.noop", every(60))
    now = clock()
    for minutes, state in (
        (1, "succeeded"),
        (1, "succeeded"),
        (2, "failed"),
        (30, "skipped"),
        (90, "duplicate"),
        (60 * 30, "succeeded"),
        (3, "running"),
    ):
        at = now - timedelta(minutes=minutes)
        insert_run(celery_app, "job", at, state=state, updated_at=at)
    for minutes in (1, 5, 120):
        at = now - timedelta(minutes=minutes)
        insert_fire(celery_app, "job", at, created_at=at)
    series = client.get("/api/overview").json()["series"]
    hour, day = series["hour"], series["day"]
    assert hour["bucket_seconds"] == 60
    assert len(hour["fires"]) == 60
    assert hour["totals"] == {"fires": 2, "succeeded": 2, "failed": 1, "skipped": 1, "duplicate": 0}
    assert hour["runs"]["succeeded"][-2] == 2  # 11:59, the bucket before the current minute
    assert day["bucket_seconds"] == 900
    assert len(day["fires"]) == 96
    assert day["totals"] == {"fires": 3, "succeeded": 2, "failed": 1, "skipped": 1, "duplicate": 1}
    page = client.get("/").text
    assert (
        'aria-label="Last hour: 2 fires; runs: 2 succeeded, 1 failed, 1 skipped, 0 duplicate"'
        in page
    )
    assert "<title>Last day: 3 fires" in page


def test_a_later_overview_reads_only_the_minutes_since_the_last_one(
    celery_app: Celery, client: Client, store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add("job", "t.noop", every(60))
    insert_run(celery_app, "job", clock() - timedelta(minutes=5), state="succeeded")
    insert_run(celery_app, "job", clock() - timedelta(seconds=30), state="failed")
    first = client.get("/api/overview").json()["series"]["hour"]["totals"]
    assert (first["succeeded"], first["failed"]) == (1, 1)
    clock.advance(180)
    # A run ending now is counted; a row written into a minute read three minutes ago
    # (past the settling minutes) is not read again.
    insert_run(celery_app, "job", clock(), state="succeeded")
    insert_run(celery_app, "job", clock() - timedelta(minutes=8), state="skipped")
    later = client.get("/api/overview").json()["series"]["hour"]
    assert (later["totals"]["succeeded"], later["totals"]["skipped"]) == (2, 0)
    assert later["runs"]["failed"][-5] == 1  # 11:59, still where it was counted
    clock.advance(3600)
    gone = client.get("/api/overview").json()["series"]["hour"]["totals"]
    assert (gone["succeeded"], gone["failed"]) == (0, 0)


def test_the_next_clock_change_among_the_zones_in_use_is_shown_with_what_it_does(
    celery_app: Celery, store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add("berlin", "t.noop", cron("30 2 * * *", "Europe/Berlin"))
    store.add("utc", "t.noop", cron("0 3 * * *", "UTC"))
    app = create_app(celery_app, token=TOKEN, clock=clock)
    client = Client(app)
    change = client.get("/api/overview").json()["next_clock_change"]
    assert change["at"] == "2026-10-25T01:00:00Z"
    assert change["zones"] == ["Europe/Berlin"]
    assert change["kind"] == "fold"
    assert (change["before_abbreviation"], change["after_abbreviation"]) == ("CEST", "CET")
    assert change["effect"].startswith("Clocks go back 1 hour at 03:00 (CEST → CET)")
    # The zones are read again only after five minutes, on a thread of their own: the
    # overview that finds them older still answers the kept ones.
    store.add("sydney", "t.noop", cron("0 1 * * *", "Australia/Sydney"))
    assert client.get("/api/overview").json()["next_clock_change"]["zones"] == ["Europe/Berlin"]
    clock.advance(301)
    assert client.get("/api/overview").json()["next_clock_change"]["zones"] == ["Europe/Berlin"]
    app.state.overview_kept.zones.wait()
    change = client.get("/api/overview").json()["next_clock_change"]
    assert change["at"] == "2026-10-03T16:00:00Z"
    assert change["zones"] == ["Australia/Sydney"]
    assert change["kind"] == "gap"
    assert "Clocks go forward 1 hour at 02:00 (AEST → AEDT)" in client.get("/").text
    client.close()


def test_the_counts_are_kept_ten_seconds_then_counted_again(
    celery_app: Celery, store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add("one", "t.noop", every(3600))
    console = create_app(celery_app, token=TOKEN, clock=clock).state.console
    kept = Kept(background=False)
    assert read_overview(console, kept).counts["ok"] == 1
    store.add("two", "t.noop", every(3600))
    assert read_overview(console, kept).counts["ok"] == 1
    clock.advance(10)
    found = read_overview(console, kept)
    assert found.counts["ok"] == 2
    assert found.counted_at == clock()


def test_the_live_areas_are_marked_for_the_polling_script(client: Client) -> None:
    page = client.get("/").text
    for area in ("beat-banner", "counts", "beats", "clock-change", "activity"):
        assert f'id="{area}" data-live' in page


def test_a_clock_change_of_half_an_hour_is_said_in_minutes_and_a_zone_without_one_is_none(
    clock: FrozenClock,
) -> None:
    change = next_clock_change(["Asia/Tokyo", "Australia/Lord_Howe"], clock())
    assert change is not None
    assert change["zones"] == ["Australia/Lord_Howe"]
    assert change["at"] == "2026-10-03T15:30:00Z"
    assert change["effect"].startswith(
        "Clocks go forward 30 minutes at 02:00 (+1030 → +11): wall times 02:00 to 02:29"
    )
    assert next_clock_change(["Asia/Tokyo", "UTC"], clock()) is None
    assert next_clock_change(["Not/AZone"], clock()) is None


def test_a_served_console_reads_its_overview_as_it_starts_not_at_the_first_request(
    celery_app: Celery, store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add("nightly", "t.noop", cron("30 1 * * *", "Europe/London"))
    app = create_app(celery_app, token=TOKEN, clock=clock)
    kept = app.state.overview_kept
    assert not kept.counts.ready
    assert not kept.zones.ready

    async def serve() -> None:  # what a server does with the app as it starts and stops
        async with app.router.lifespan_context(app):
            app.state.overview_warm_up.join(30)

    asyncio.run(serve())
    assert kept.counts.ready
    assert kept.zones.ready
    assert Client(app).get("/api/overview").json()["counts"]["ok"] == 1
