"""The pytest plugin (``celery_gaffer.pytest_plugin``): its ``gaffer_beat`` fixture drives
the real Scheduler on a virtual clock, here over Celery's ``celery_app`` fixture (the
project's conftest loads ``celery.contrib.pytest``); a pytester run shows a user's suite
picks it up through the ``pytest11`` entry point."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery

from celery_gaffer import GafferError, cron, every
from celery_gaffer.testing import GafferBeat, check_in_memory

pytest_plugins = ["pytester"]

LONDON = ZoneInfo("Europe/London")


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=timezone.utc)


@pytest.fixture
def beat(gaffer_beat: GafferBeat) -> GafferBeat:
    """``gaffer_beat`` with the tasks these tests schedule registered on its app."""
    for name in ("shop.nightly", "shop.morning", "shop.hourly", "shop.ping"):
        gaffer_beat.app.task(name=name, shared=False)(_noop)
    return gaffer_beat


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def test_the_fixture_rehearses_celerys_in_process_app(
    gaffer_beat: GafferBeat, celery_app: Celery
) -> None:
    assert gaffer_beat.app is celery_app
    assert celery_app.conf.broker_url == "memory://"
    assert celery_app.conf.gaffer_database_url.startswith("sqlite:///")


def test_berlin_0230_fires_once_at_0300_on_the_night_the_clocks_go_forward(
    beat: GafferBeat,
) -> None:
    beat.start(at="2027-03-27T12:00+01:00")
    beat.store.add("nightly", "shop.nightly", cron("30 2 * * *", "Europe/Berlin"))
    # 02:30 does not exist in Berlin on 28 March 2027: it fires when the gap ends, 03:00
    # CEST (01:00Z), once.
    sent = beat.advance(to="2027-03-28T03:00+02:00")
    assert [(f.schedule, f.task, f.nominal_at, f.sent_at) for f in sent] == [
        ("nightly", "shop.nightly", utc(2027, 3, 28, 1, 0), utc(2027, 3, 28, 1, 0))
    ]
    assert sent[0].key == "nightly@2027-03-28T01:00:00Z"
    assert beat.now == utc(2027, 3, 28, 1, 0)
    # The next night 02:30 exists again: 02:30 CEST.
    beat.advance(to="2027-03-29T12:00+02:00")
    assert [f.nominal_at for f in beat.sent] == [utc(2027, 3, 28, 1, 0), utc(2027, 3, 29, 0, 30)]


def test_london_0900_stays_at_0900_local_across_the_autumn_change(beat: GafferBeat) -> None:
    beat.start(at=datetime(2027, 10, 29, 12, 0, tzinfo=LONDON))
    beat.store.add("morning", "shop.morning", cron("0 9 * * *", "Europe/London"))
    beat.advance(to=datetime(2027, 11, 2, 0, 0, tzinfo=LONDON))
    fires = [f.nominal_at for f in beat.sent_of("morning")]
    assert fires == [
        utc(2027, 10, 30, 8, 0),  # BST
        utc(2027, 10, 31, 9, 0),  # GMT from 02:00 BST on the 31st
        utc(2027, 11, 1, 9, 0),
    ]
    assert {f.astimezone(LONDON).strftime("%H:%M") for f in fires} == {"09:00"}
    assert [f.sent_at for f in beat.sent] == fires  # each sent at its time


@pytest.mark.parametrize(
    ("policy", "after_outage"),
    [
        ("all", [utc(2027, 1, 4, h) for h in (2, 3, 4, 5)]),
        ("latest", [utc(2027, 1, 4, 5)]),
    ],
)
def test_an_outage_is_caught_up_by_the_schedules_policy(
    beat: GafferBeat, policy: str, after_outage: list[datetime]
) -> None:
    beat.start(at="2027-01-04T00:30Z")
    beat.store.add("hourly", "shop.hourly", cron("0 * * * *", "UTC"), gaffer={"catchup": policy})
    sent = beat.down("2027-01-04T01:30Z", "2027-01-04T05:30Z")
    assert [f.nominal_at for f in beat.sent] == [utc(2027, 1, 4, 1), *after_outage]
    # Nothing was sent while Beat was down: the restarted Beat sent them at 05:30.
    assert [(f.nominal_at, f.sent_at) for f in sent] == [
        (nominal, utc(2027, 1, 4, 5, 30)) for nominal in after_outage
    ]
    beat.advance(by=timedelta(minutes=30))
    assert beat.sent[-1].nominal_at == utc(2027, 1, 4, 6) == beat.now


def test_the_apps_beat_schedule_is_synced_at_start_and_its_messages_are_in_memory(
    beat: GafferBeat,
) -> None:
    beat.app.conf.beat_schedule = {
        "ping": {"task": "shop.ping", "schedule": every(60), "args": [1], "kwargs": {"a": 2}}
    }
    beat.start(at="2027-01-04T12:00Z")
    assert [s.name for s in beat.store.list()] == ["ping"]
    sent = beat.advance(by=180)
    assert [(f.task, f.args, f.kwargs) for f in sent] == [("shop.ping", (1,), {"a": 2})] * 3
    assert [f.sent_at for f in sent] == [utc(2027, 1, 4, 12, m) for m in (1, 2, 3)]
    with beat.app.connection_for_write() as connection:
        queue = connection.SimpleQueue("celery")
        ids = [queue.get(block=False).headers["id"] for _ in sent]
        queue.close()
    assert ids == [f.task_id for f in sent]


def test_close_empties_the_queues_it_published_to(beat: GafferBeat) -> None:
    beat.start(at="2027-01-04T12:00Z")
    beat.store.add("ping", "shop.ping", every(60))
    assert len(beat.advance(by=120)) == 2
    beat.close()
    with beat.app.connection_for_write() as connection:
        assert connection.default_channel.queue_purge("celery") == 0
    assert not beat.running


def test_mistakes_are_errors_naming_the_argument(beat: GafferBeat) -> None:
    with pytest.raises(GafferError, match="call start") as not_started:
        beat.advance(by=60)
    assert not_started.value.field == "start"
    beat.start(at="2027-01-04T12:00Z")
    with pytest.raises(GafferError, match="not an aware time") as naive:
        beat.advance(to="2027-01-04T13:00")
    assert naive.value.field == "to"
    with pytest.raises(GafferError, match="before the virtual time") as back:
        beat.advance(to="2027-01-04T11:00Z")
    assert back.value.field == "to"


def test_a_real_broker_is_refused() -> None:
    app = Celery("real-broker", broker="redis://127.0.0.1:1/0", set_as_current=False)
    with pytest.raises(GafferError, match="in-memory broker only") as refused:
        check_in_memory(app)
    assert refused.value.field == "broker_url"
    app.close()


USER_CONFTEST = """
import pytest
from celery import Celery

# The user's app, with its real broker: gaffer_beat publishes to memory:// instead.
app = Celery("shop", broker="redis://127.0.0.1:1/0", set_as_current=False)


@app.task(name="shop.nightly")
def nightly():
    return "done"


@pytest.fixture
def gaffer_app():
    yield app
    assert app.conf.broker_url == "redis://127.0.0.1:1/0"  # put back
"""

USER_SUITE = """
from datetime import datetime, timezone

from celery_gaffer import cron


def test_0230_runs_at_0300_the_night_the_clocks_go_forward(gaffer_beat):
    gaffer_beat.start(at="2027-03-27T12:00+01:00")
    gaffer_beat.store.add("nightly", "shop.nightly", cron("30 2 * * *", "Europe/Berlin"))
    gaffer_beat.advance(to="2027-03-28T03:00+02:00")
    assert [f.nominal_at for f in gaffer_beat.sent] == [
        datetime(2027, 3, 28, 1, 0, tzinfo=timezone.utc)
    ]


def test_wrongly_assumes_0230_is_0130_utc_as_in_winter(gaffer_beat):
    gaffer_beat.start(at="2027-03-27T12:00+01:00")
    gaffer_beat.store.add("nightly", "shop.nightly", cron("30 2 * * *", "Europe/Berlin"))
    gaffer_beat.advance(to="2027-03-28T03:00+02:00")
    assert [f.nominal_at for f in gaffer_beat.sent] == [
        datetime(2027, 3, 28, 1, 30, tzinfo=timezone.utc)
    ]
"""


def test_a_users_suite_gets_the_fixture_from_the_entry_point_and_a_wrong_dst_assumption_fails(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(USER_CONFTEST)
    pytester.makepyfile(test_nightly=USER_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*FAILED test_nightly.py::test_wrongly_assumes_0230_is_0130_utc_as_in_winter*",
            "*datetime(2027, 3, 28, 1, 0, tzinfo=datetime.timezone.utc)*",
        ]
    )
    without = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:gaffer")
    without.assert_outcomes(errors=2)
    without.stdout.fnmatch_lines(["*fixture 'gaffer_beat' not found*"])


POOLED_CONFTEST = """
import pytest
from celery import Celery

# The user's app on a real Redis, whose producer pool was made before the test.
app = Celery("shop", broker={broker!r}, set_as_current=False)


@app.task(name="shop.nightly")
def nightly():
    return "done"


@pytest.fixture
def gaffer_app():
    with app.producer_or_acquire():
        pass
    yield app
    with app.producer_or_acquire() as producer:  # the app's own broker again
        assert producer.connection.transport.driver_type == "redis"
"""

POOLED_SUITE = """
from celery_gaffer import every


def test_a_trigger_goes_to_memory_not_to_the_apps_broker(gaffer_beat):
    gaffer_beat.start(at="2027-01-04T09:00Z")
    gaffer_beat.store.add("nightly", "shop.nightly", every(3600))
    gaffer_beat.store.trigger("nightly")
    assert gaffer_beat.app.conf.broker_url == "memory://"
"""


@pytest.mark.redis
def test_an_apps_producer_pool_made_before_the_test_does_not_reach_its_real_broker(
    pytester: pytest.Pytester, redis_url: str
) -> None:
    import redis

    pytester.makeconftest(POOLED_CONFTEST.format(broker=redis_url))
    pytester.makepyfile(test_pooled=POOLED_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.llen("celery") == 0  # nothing published to the real broker
    finally:
        client.close()
