"""A schedule's upcoming fires on its page and in the API: each fire its calendars skip or
move listed with the reason ``explain`` gives, from before the stored next fire when the
calendar skipped or moved the fires before it."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from celery_gaffer import ScheduleStore, cron, every

from ...support import FrozenClock
from .conftest import Client
from .test_schedule_page import text_of

UTC = timezone.utc
BOXING_DAY = "2026-12-28: Boxing Day (observed), holidays:GB → moved to 2026-12-29"


def test_a_moved_fire_is_listed_with_its_reason_on_the_page_and_in_the_api(
    clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    clock.now = datetime(2026, 12, 22, 12, tzinfo=UTC)
    store.add(
        "mondays", "t.noop", cron("0 9 * * 1", "Europe/London"),
        gaffer={"skip_on": ["holidays:GB"], "on_skip": "next_day"},
    )  # fmt: skip
    # Beat sends Tuesday's moved fire next: the page lists the Monday it came from first.
    assert store.get("mondays").next_fire_at == datetime(2026, 12, 29, 9, tzinfo=UTC)
    page = client.get("/schedules/mondays").text
    fires = text_of(page, "next-fires")
    assert fires.startswith("2026-12-28 09:00 GMT (09:00Z)")
    assert f"calendar: {BOXING_DAY}" in fires
    assert fires.count("calendar:") == 1  # 4 January and the others are plain fires
    assert re.search(r"<li><del>[^<]*2026-12-28", page)

    body = client.get("/api/schedules/mondays").json()
    listed = [(fire["at"], fire["reason"]) for fire in body["next_fires"]]
    assert listed[:2] == [("2026-12-28T09:00:00Z", BOXING_DAY), ("2027-01-04T09:00:00Z", None)]
    assert all(reason is None for _, reason in listed[1:])
    assert body["calendar"] == [BOXING_DAY]


def test_fires_a_stored_calendar_skips_are_listed_before_the_next_fire(
    clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    clock.now = datetime(2026, 12, 27, 12, tzinfo=UTC)
    store.add_calendar("freeze", ["2026-12-28", "2026-12-29"])
    store.add("daily", "t.noop", cron("0 9 * * *"), gaffer={"skip_on": ["freeze"]})
    assert store.get("daily").next_fire_at == datetime(2026, 12, 30, 9, tzinfo=UTC)
    body = client.get("/api/schedules/daily").json()
    reasons = [(fire["at"][:10], fire["reason"]) for fire in body["next_fires"][:3]]
    assert reasons == [
        ("2026-12-28", "2026-12-28: in freeze → skipped"),
        ("2026-12-29", "2026-12-29: in freeze → skipped"),
        ("2026-12-30", None),
    ]
    assert body["calendar"] == [
        "2026-12-28: in freeze → skipped", "2026-12-29: in freeze → skipped"
    ]  # fmt: skip
    fires = text_of(client.get("/schedules/daily").text, "next-fires")
    assert "calendar: 2026-12-29: in freeze → skipped" in fires

    # Without a calendar: every fire has a null reason.
    store.add("poll", "t.noop", every(60))
    plain = client.get("/api/schedules/poll").json()
    assert {fire["reason"] for fire in plain["next_fires"]} == {None}
    assert plain["calendar"] == []


def test_a_fire_already_moved_back_and_sent_is_not_listed_again(
    clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    # Thursday 31 is frozen and moved to Wednesday 30; once Wednesday's fire is decided
    # (the watermark there), the list starts at the next fire, 7 January.
    clock.now = datetime(2026, 12, 30, 12, tzinfo=UTC)
    store.add_calendar("freeze", ["2026-12-31"])
    store.add(
        "thursdays", "t.noop", cron("0 9 * * 4"),
        gaffer={"skip_on": ["freeze"], "on_skip": "previous_day"},
        watermark_at=datetime(2026, 12, 30, 9, tzinfo=UTC),
    )  # fmt: skip
    assert store.get("thursdays").next_fire_at == datetime(2027, 1, 7, 9, tzinfo=UTC)
    body = client.get("/api/schedules/thursdays").json()
    assert body["next_fires"][0] == {
        "at": "2027-01-07T09:00:00Z", "local": "2027-01-07T09:00:00+00:00", "zone": "UTC",
        "reason": None,
    }  # fmt: skip
