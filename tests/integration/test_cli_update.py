"""`gaffer update` through the real click group, a real app and real databases; Beat's
tick (real Redis broker) uses the edit without a restart."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from click.testing import Result

from celery_gaffer import Scheduler, ScheduleStore, cron, every

from ..support import FrozenClock, gaffer_cli, message_headers
from .test_previews import database_rows

UTC = timezone.utc


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    app = Celery("update-test", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = database_url

    @app.task(name="t.report", shared=False)
    def report(*args: Any, **kwargs: Any) -> None:
        return None

    @app.task(name="t.other", shared=False)
    def other(*args: Any, **kwargs: Any) -> None:
        return None

    yield app
    app.close()


def error_line(result: Result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stdout)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_beat_fires_the_updated_zone_on_its_next_tick_without_a_restart(
    app: Celery, redis_url: str
) -> None:
    ScheduleStore(app).add("nightly", "t.report", cron("30 2 * * *"))
    now = datetime.now(UTC)
    clock = FrozenClock(now)
    beat = Scheduler(app, clock=clock)  # a Beat already running when the edit lands
    beat.tick()

    result = gaffer_cli(app, "update", "nightly", "--tz", "America/New_York")
    assert result.exit_code == 0, result.stdout
    new = cron("30 2 * * *", "America/New_York")
    old_fire, new_fire = cron("30 2 * * *").next_after(now), new.next_after(now)
    assert old_fire is not None
    assert new_fire is not None
    local = new_fire.astimezone(ZoneInfo("America/New_York"))
    assert f"  {local:%Y-%m-%d} 02:30 {local.tzname()} ({new_fire:%H:%M}Z)" in result.stdout

    for moment in sorted([old_fire, new_fire - (new_fire - now) / 2, new_fire]):
        clock.now = moment
        beat.tick()
    # Only the New York fire was sent: the UTC one is no longer a fire of the schedule.
    assert [h["gaffer_nominal_at"] for h in message_headers(redis_url)] == [
        new_fire.strftime("%Y-%m-%dT%H:%M:%SZ")
    ]


def test_beat_fires_a_changed_cron_expression_and_kind(app: Celery, redis_url: str) -> None:
    ScheduleStore(app).add("poll", "t.report", every(3600))
    now = datetime.now(UTC)
    clock = FrozenClock(now)
    beat = Scheduler(app, clock=clock)
    result = gaffer_cli(app, "update", "poll", "--cron", "*/5 * * * *", "--tz", "Asia/Tokyo")
    assert result.exit_code == 0, result.stdout
    assert "schedule: every 3600s -> cron '*/5 * * * *' Asia/Tokyo" in result.stdout
    first = cron("*/5 * * * *").next_after(now)
    assert first is not None
    clock.now = first
    beat.tick()
    assert [h["gaffer_nominal_at"] for h in message_headers(redis_url)] == [
        first.strftime("%Y-%m-%dT%H:%M:%SZ")
    ]


def test_update_changes_only_what_is_given(app: Celery) -> None:
    store = ScheduleStore(app)
    store.add(
        "nightly",
        "t.report",
        cron("30 2 * * *", "Europe/London", jitter=30),
        args=[1],
        kwargs={"a": 1},
        options={"queue": "reports"},
        gaffer={"catchup": "all", "overlap": "forbid", "grace": 600},
    )
    store.pause("nightly")
    result = gaffer_cli(
        app, "update", "nightly", "--cron", "0 3 * * 1-5", "--kwargs", '{"a": 2}', "--grace", "60"
    )
    assert result.exit_code == 0, result.stdout
    assert result.stdout.splitlines() == [
        "updated nightly:",
        "  schedule: cron '30 2 * * *' Europe/London, jitter 30s -> "
        "cron '0 3 * * 1-5' Europe/London, jitter 30s",
        "  kwargs: {'a': 1} -> {'a': 2}",
        "  grace: 600s -> 60s",
        "paused: it fires again after `gaffer resume nightly`",
    ]
    got = store.get("nightly")
    assert got.schedule == cron("0 3 * * 1-5", "Europe/London", jitter=30)
    assert (got.task, got.args, got.kwargs, got.options) == (
        "t.report",
        [1],
        {"a": 2},
        {"queue": "reports"},
    )
    assert (got.policy.catchup, got.policy.overlap, got.policy.grace) == ("all", "forbid", 60.0)
    assert not got.enabled
    assert got.next_fire_at is None

    result = gaffer_cli(app, "update", "nightly", "--task", "t.other", "--every", "120")
    assert result.exit_code == 0, result.stdout
    assert "  task: t.report -> t.other" in result.stdout
    assert store.get("nightly").schedule == every(120, jitter=30)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--cron", "61 * * * *"], "expr"),
        (["--tz", "Mars/Olympus"], "tz 'Mars/Olympus' is not a known IANA zone"),
        (["--task", "t.unknown", "--tz", "UTC"], "task"),
        (["--jitter", "86400", "--tz", "UTC"], "jitter"),
        (["--args", "not json", "--tz", "UTC"], "--args"),
        (["--options", '{"task_id": "x"}', "--tz", "UTC"], "options"),
        (
            ["--cron", "0 3 * * *", "--every", "60"],
            "only one of --cron EXPR, --every SECONDS or --at",
        ),
        (["--catchup", "some"], "--catchup"),
        ([], "nothing to change"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(app: Celery, args: list[str], words: str) -> None:
    store = ScheduleStore(app)
    before = store.add("nightly", "t.report", cron("30 2 * * *"), args=[1])
    line = error_line(gaffer_cli(app, "update", "nightly", *args))
    assert words in line
    assert store.get("nightly") == before


def test_unknown_names_are_refused_and_config_schedules_say_beat_puts_them_back(
    app: Celery,
) -> None:
    assert "no schedule named 'nope'" in error_line(
        gaffer_cli(app, "update", "nope", "--tz", "UTC")
    )
    app.conf.beat_schedule = {"from-config": {"task": "t.report", "schedule": every(60)}}
    Scheduler(app, clock=FrozenClock(datetime.now(UTC)))
    result = gaffer_cli(app, "update", "from-config", "--every", "30")
    assert result.exit_code == 0, result.output
    assert "note: from-config comes from app.conf.beat_schedule" in result.output
    assert ScheduleStore(app).get("from-config").schedule == every(30)


# -- --dry-run: update, resume and backfill show their preview and change nothing -------


def test_update_dry_run_shows_the_fires_the_update_then_gives_and_changes_nothing(
    app: Celery, redis_url: str
) -> None:
    ScheduleStore(app).add("nightly", "t.report", cron("30 2 * * *"))
    before = database_rows(app)
    result = gaffer_cli(app, "update", "nightly", "--tz", "Europe/London", "--dry-run")
    assert result.exit_code == 0, result.output
    assert database_rows(app) == before
    lines = result.stdout.splitlines()
    assert lines[0].startswith(
        "after the edit: cron '30 2 * * *' Europe/London (a new timing: it starts from now); "
        "next fire "
    )
    assert lines[-1] == "dry run: nothing was changed"
    assert lines[1] == "next fires:"
    fires = lines[2:-1]
    assert len(fires) == 5
    assert all(" 02:30 " in line and line.startswith("  ") for line in fires)

    done = gaffer_cli(app, "update", "nightly", "--tz", "Europe/London")
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[-3:] == fires[:3]  # the same next fires, as previewed
    assert message_headers(redis_url) == []


def test_resume_dry_run_counts_the_paused_fires_and_changes_nothing(app: Celery) -> None:
    now = datetime.now(UTC)
    earlier = ScheduleStore(app, clock=FrozenClock(now - timedelta(days=3)))
    earlier.add("nightly", "t.report", cron("30 2 * * *", "Asia/Tokyo"))
    earlier.pause("nightly")
    before = database_rows(app)
    result = gaffer_cli(app, "resume", "nightly", "--dry-run")
    assert result.exit_code == 0, result.output
    assert database_rows(app) == before
    lines = result.stdout.splitlines()
    # Exactly three 02:30 (Tokyo) fires fall in any three days.
    assert lines[0].startswith("resuming sends nothing now: the next fire is ")
    assert lines[0].endswith(" 17:30Z); 3 fires while paused are not sent")
    fire = re.compile(r"  \d{4}-\d\d-\d\d 02:30 JST \(\d{4}-\d\d-\d\d 17:30Z\)")
    assert len(lines) == 8
    assert lines[1] == "next fires:"
    assert all(fire.fullmatch(line) for line in lines[2:-1]), lines
    assert lines[2].strip() in lines[0]
    assert lines[-1] == "dry run: nothing was changed"

    done = gaffer_cli(app, "resume", "nightly")
    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == f"resumed nightly, next fire {lines[2].strip()}"


def test_backfill_dry_run_lists_the_fires_backfill_sends_and_sends_nothing(
    app: Celery, redis_url: str
) -> None:
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    store = ScheduleStore(app)
    store.add("hourly", "t.report", every(3600))
    store.backfill("hourly", hour - timedelta(hours=5), hour - timedelta(hours=3))
    sent = len(message_headers(redis_url))
    assert sent == 2
    start, end = (hour - timedelta(hours=5)).isoformat(), (hour - timedelta(hours=1)).isoformat()
    before = database_rows(app)
    result = gaffer_cli(app, "backfill", "hourly", "--from", start, "--to", end, "--dry-run")
    assert result.exit_code == 0, result.output
    assert database_rows(app) == before
    assert len(message_headers(redis_url)) == sent
    fires = [hour - timedelta(hours=2), hour - timedelta(hours=1)]
    shown = [f"{fire:%Y-%m-%d %H:%M:%S}Z" for fire in fires]
    assert result.stdout.splitlines() == [
        f"backfill sends 2 fires ({shown[0]} ... {shown[1]}); 2 are already in the ledger",
        "fires it sends:",
        f"  {shown[0]}",
        f"  {shown[1]}",
        "dry run: nothing was changed",
    ]

    done = gaffer_cli(app, "backfill", "hourly", "--from", start, "--to", end)
    assert done.exit_code == 0, done.output
    assert "sent 2 fires" in done.stdout
    assert "2 were already in the ledger" in done.stdout
    assert [h["gaffer_nominal_at"] for h in message_headers(redis_url)[sent:]] == [
        f"{fire:%Y-%m-%dT%H:%M:%S}Z" for fire in fires
    ]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["resume", "nope", "--dry-run"], "no schedule named 'nope'"),
        (["update", "hourly", "--tz", "Europe/London", "--dry-run"], "a zone applies only to"),
        (
            ["backfill", "hourly", "--from", "2026-01-01", "--to", "2999-01-01", "--dry-run"],
            "to: a backfill covers the past only",
        ),
        (
            [
                "backfill",
                "hourly",
                "--from",
                "2026-01-01",
                "--to",
                "2026-03-01",
                "--limit",
                "5",
                "--dry-run",
            ],
            "more than 5 fires",
        ),
    ],
)
def test_a_bad_dry_run_is_one_line_and_changes_nothing(
    app: Celery, args: list[str], words: str
) -> None:
    ScheduleStore(app).add("hourly", "t.report", every(3600))
    before = database_rows(app)
    assert words in error_line(gaffer_cli(app, *args))
    assert database_rows(app) == before


def test_schedules_shows_each_schedules_send_options(app: Celery) -> None:
    store = ScheduleStore(app)
    store.add(
        "reports",
        "t.report",
        every(60),
        options={"queue": "reports", "priority": 5, "headers": {"team": "billing"}},
    )
    store.add("plain", "t.report", every(60))
    result = gaffer_cli(app, "schedules")
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split()[-1] == "OPTIONS"
    by_name = {row.split()[0]: row for row in rows}
    assert by_name["reports"].endswith('headers={"team":"billing"} priority=5 queue=reports')
    assert by_name["plain"].endswith(" -")
