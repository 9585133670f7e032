"""A schedule's page: run strip, upcoming fires with clock changes marked, the zone's next
clock change, change history, remove with confirmation, a refused edit kept; and a late
schedule's reason when no Beat is running."""

from __future__ import annotations

import html
import re
from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery

from celery_gaffer import ScheduleStore, cron, every
from celery_gaffer.exceptions import ScheduleNotFound
from celery_gaffer.store import audit, database_for
from celery_gaffer.web import create_app

from ...support import FrozenClock
from .conftest import TOKEN, Client, insert_run, log_in, tick_beat
from .test_pages import cell

UTC = timezone.utc


def text_of(page: str, element_id: str) -> str:
    found = re.search(rf'<(\w+)[^>]* id="{element_id}"[^>]*>(.*?)</\1>', page, re.S)
    assert found is not None, f"no #{element_id}"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", found.group(2))).split())


def test_the_page_shows_the_next_clock_change_months_away(
    clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    clock.now = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
    store.add("berlin-night", "t.noop", cron("30 2 * * *", "Europe/Berlin"))
    page = client.get("/schedules/berlin-night").text
    change = text_of(page, "next-clock-change")
    assert change.startswith("2027-03-28: clocks go forward 1 h, from 02:00 CET to 03:00 CEST")
    assert "02:30 does not exist: fires once, at the gap's end, 03:00 CEST (01:00Z)" in change
    assert 'id="next-clock-change" class="affected"' in page
    # None of the next ten fires is moved in December.
    assert "dst-mark" not in page

    store.add("utc-poll", "t.noop", every(60))
    utc_page = client.get("/schedules/utc-poll").text
    assert text_of(utc_page, "next-clock-change").startswith("None")


def test_a_fire_a_clock_change_moves_is_marked_in_the_list(
    clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    clock.now = datetime(2027, 3, 26, 12, 0, tzinfo=UTC)
    store.add("berlin-night", "t.noop", cron("30 2 * * *", "Europe/Berlin"))
    page = client.get("/schedules/berlin-night").text
    moved = re.findall(r'<li class="moved" title="([^"]*)">(.*?)</li>', page)
    assert len(moved) == 1
    title, item = moved[0]
    assert "02:30 does not exist" in html.unescape(title)
    assert " ".join(re.sub(r"<[^>]+>", " ", html.unescape(item)).split()) == (
        "2027-03-28 03:00 CEST (01:00Z) 02:30 → 03:00 CEST, clock change"
    )


def test_the_run_strip_shows_the_last_runs_newest_right(
    celery_app: Celery, clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    store.add("every-minute", "t.noop", every(60))
    states = ["succeeded", "failed", "running"]
    for index, state in enumerate(states):
        at = clock.now + timedelta(minutes=index)
        insert_run(celery_app, "every-minute", at, state=state, duration=2.0 + index)
    page = client.get("/schedules/every-minute").text
    strip = re.search(r'<ol class="run-strip" id="run-strip"[^>]*>(.*?)</ol>', page, re.S)
    assert strip is not None
    blocks = re.findall(
        r'<a href="/runs/(\d+)" class="run-block (\w+)" title="([^"]*)" aria-label="([^"]*)"',
        strip.group(1),
    )
    assert [block[1] for block in blocks] == states
    ids = [int(block[0]) for block in blocks]
    assert ids == sorted(ids)
    assert blocks[1][2] == f"run {ids[1]} at 2026-06-01 12:01Z: failed, 3.00s"
    assert blocks[1][3] == blocks[1][2]


def test_the_change_history_lists_the_newest_entries(
    celery_app: Celery, clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    store.add("billing", "t.noop", every(60))
    database = database_for(celery_app)
    with database.begin() as conn:
        audit.record(
            conn,
            database.models,
            audit.Actor("alice", "console"),
            "pause",
            "billing",
            clock.now,
            note="<b>month end</b>",
            changes={"enabled": [True, False]},
        )
    page = client.get("/schedules/billing").text
    history = text_of(page, "history")
    assert "alice console pause <b>month end</b> enabled : true → false" in history
    assert "<b>month end</b>" not in page  # escaped


def test_a_refused_edit_shows_the_form_again_with_the_error_by_the_field(
    client: Client, store: ScheduleStore
) -> None:
    store.add("nightly", "t.noop", cron("30 1 * * *"))
    csrf = log_in(client)
    sent = {"csrf": csrf, "cron": "15 4 * * *", "grace": "soon", "kwargs": '{"a": 1}'}
    response = client.post("/schedules/nightly/edit", data=sent)
    assert response.status_code == 400
    page = response.text
    assert '<details id="edit-details" open>' in page
    grace = re.search(r'<input [^>]*name="grace"[^>]*>', page)
    assert grace is not None
    assert 'value="soon"' in grace.group(0)
    assert 'aria-invalid="true" aria-describedby="edit-error"' in grace.group(0)
    assert "grace: expected a number of seconds" in text_of(page, "edit-error")
    # What else was typed is kept too; nothing was written.
    assert 'value="15 4 * * *"' in page
    assert 'value="{&#34;a&#34;: 1}"' in page or 'value="{&quot;a&quot;: 1}"' in page
    assert store.get("nightly").schedule == cron("30 1 * * *")

    # An error on a field the form does not have is shown above the fields.
    bad = client.post("/schedules/nightly/edit", data={"csrf": csrf, "cron": "not cron"})
    assert bad.status_code == 400
    assert "cron" in text_of(bad.text, "edit-error")


def test_remove_asks_first_then_goes_to_the_list_with_a_flash(
    client: Client, store: ScheduleStore
) -> None:
    store.add("old-job", "t.noop", every(60))
    csrf = log_in(client)
    asked = client.post("/schedules/old-job/remove", data={"csrf": csrf})
    assert asked.status_code == 200
    assert "Confirm: remove old-job" in asked.text
    assert '<input type="hidden" name="confirm" value="1">' in asked.text
    assert "Beat adds it again" not in asked.text  # only said of config schedules
    assert store.get("old-job").name == "old-job"  # nothing removed yet
    done = client.post("/schedules/old-job/remove", data={"csrf": csrf, "confirm": "1"})
    assert done.status_code == 303
    assert done.headers["location"] == "/schedules"
    with pytest.raises(ScheduleNotFound):
        store.get("old-job")
    listing = client.get("/schedules").text
    assert "removed old-job" in text_of(listing, "flash")
    assert client.post("/schedules/old-job/remove", data={"csrf": csrf}).status_code == 404


def test_a_late_schedule_says_no_beat_is_running_when_none_ticks(
    celery_app: Celery, clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    store.add("late-one", "t.noop", every(60))
    console = create_app(celery_app, token=TOKEN, clock=clock).state.console
    clock.advance(600)
    assert console.beat_down()
    assert console.last_tick() is None
    page = client.get("/schedules").text
    assert cell(page, "late-one", "reason") == "no Beat is running (none has registered a tick)"
    tick_beat(celery_app, clock.now - timedelta(seconds=120))
    assert console.beat_down()
    assert console.last_tick() == clock.now - timedelta(seconds=120)
    reason = "no Beat is running (last tick 2026-06-01 12:08:00Z)"
    assert cell(client.get("/schedules").text, "late-one", "reason") == reason
    assert text_of(client.get("/schedules/late-one").text, "reason") == reason
    assert client.get("/api/alerts").json()[0]["reason"] == reason
    tick_beat(celery_app, clock.now - timedelta(seconds=30))
    assert not console.beat_down()
    assert not console.beat_down(clock.now + timedelta(seconds=30))
    assert console.beat_down(clock.now + timedelta(seconds=31))
    quoted = cell(client.get("/schedules").text, "late-one", "reason")
    assert quoted == "the fire of 2026-06-01 12:09:00Z has not succeeded"


def test_removing_a_config_schedule_warns_that_beat_adds_it_again(
    celery_app: Celery, clock: FrozenClock, client: Client
) -> None:
    config = ScheduleStore(celery_app, clock=clock, source="config")
    config.add("from-config", "t.noop", every(60))
    csrf = log_in(client)
    asked = client.post("/schedules/from-config/remove", data={"csrf": csrf})
    assert "Beat adds it again at its next start" in text_of(asked.text, "summary")


def test_a_get_page_polls_its_own_url_and_a_refused_edit_does_not_poll(
    client: Client, store: ScheduleStore
) -> None:
    store.add("nightly", "t.noop", cron("30 1 * * *"))
    csrf = log_in(client)
    page = client.get("/schedules/nightly").text
    assert '<body data-live-url="/schedules/nightly">' in page
    listed = client.get("/schedules?state=ok&q=night").text
    assert '<body data-live-url="/schedules?state=ok&amp;q=night">' in listed
    # A name holding "%" or "#" polls its own page: the URL stays percent-encoded.
    store.add("100%x#1", "t.noop", cron("30 1 * * *"))
    odd = client.get("/schedules/100%25x%231")
    assert odd.status_code == 200
    assert '<body data-live-url="/schedules/100%25x%231">' in odd.text
    # Served at the POST's URL, /schedules/nightly/edit, which a GET reads as a schedule
    # named "nightly/edit": the page answering the POST has no live URL, so no polling.
    refused = client.post("/schedules/nightly/edit", data={"csrf": csrf, "grace": "soon"})
    assert refused.status_code == 400
    assert "data-live-url" not in refused.text
    assert "<body>" in refused.text
