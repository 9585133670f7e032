"""The console's lists: filters, sort, totals and pages both ways, on pages and the API."""

from __future__ import annotations

import re
from datetime import timedelta

from celery import Celery

from celery_gaffer import ScheduleStore, cron, every
from celery_gaffer.store import database_for
from celery_gaffer.store.console_lists import (
    Count,
    Cursor,
    ScheduleFilter,
    count_schedules,
    schedule_rows,
)
from celery_gaffer.web.lists import Span

from ...support import FrozenClock
from .conftest import Client, insert_run
from .test_pages import rows_of

EN_DASH = "\N{EN DASH}"


def link(page: str, element_id: str) -> str | None:
    found = re.search(rf'<a href="([^"]*)"[^>]*id="{element_id}"', page)
    return None if found is None else found.group(1).replace("&amp;", "&")


def totals(page: str) -> str:
    """The page's totals line, its en dash written as a hyphen."""
    found = re.search(r'<p class="totals" id="totals">(.*?)</p>', page, re.S)
    assert found is not None
    return " ".join(re.sub(r"<[^>]+>", " ", found.group(1)).split()).replace(EN_DASH, "-")


def mixed(celery_app: Celery, clock: FrozenClock) -> None:
    """Schedules of two tasks, three zones and both sources."""
    db = ScheduleStore(celery_app, clock=clock, check_tasks=False)
    db.add("berlin-report", "t.report", cron("30 2 * * *", "Europe/Berlin"))
    db.add("berlin-sync", "t.sync", cron("0 * * * *", "Europe/Berlin"))
    db.add("london-report", "t.report", cron("0 6 * * *", "Europe/London"))
    db.add("utc-poll", "t.sync", every(60))
    db.pause("utc-poll")
    config = ScheduleStore(celery_app, clock=clock, check_tasks=False, source="config")
    config.add("config-report", "t.report", cron("15 3 * * *", "Europe/Berlin"))


def test_the_schedules_list_filters_by_task_zone_source_state_and_name(
    celery_app: Celery, clock: FrozenClock, client: Client
) -> None:
    mixed(celery_app, clock)
    assert rows_of(client.get("/schedules?task=t.report").text) == [
        "berlin-report",
        "config-report",
        "london-report",
    ]
    assert rows_of(client.get("/schedules?zone=Europe/Berlin").text) == [
        "berlin-report",
        "berlin-sync",
        "config-report",
    ]
    # An every schedule has no zone of its own: it is shown (and filtered) as UTC.
    assert rows_of(client.get("/schedules?zone=UTC").text) == ["utc-poll"]
    assert rows_of(client.get("/schedules?source=config").text) == ["config-report"]
    assert rows_of(client.get("/schedules?state=paused").text) == ["utc-poll"]
    both = client.get("/schedules?task=t.report&zone=Europe/Berlin&source=db&q=REP").text
    assert rows_of(both) == ["berlin-report"]
    # The filter is kept in the form, in the bulk form's hidden fields and in sort links.
    assert 'id="task-filter" value="t.report"' in both
    assert '<input type="hidden" name="zone" value="Europe/Berlin">' in both
    assert '<input type="hidden" name="q" value="REP">' in both
    assert '<input type="checkbox" name="name" value="berlin-report" form="bulk-form"' in both
    assert '<form id="bulk-form" method="get" action="/bulk"' in both
    assert '<input type="checkbox" name="all" value="1"' in both
    sort_link = link(both, "sort-next_fire")
    assert sort_link is not None
    assert "task=t.report" in sort_link
    assert "sort=next_fire" in sort_link
    assert client.get("/schedules?sort=state").status_code == 400


def test_the_schedules_list_sorts_by_name_and_next_fire_both_ways(
    celery_app: Celery, clock: FrozenClock, client: Client
) -> None:
    mixed(celery_app, clock)
    names = ["berlin-report", "berlin-sync", "config-report", "london-report", "utc-poll"]
    assert rows_of(client.get("/schedules").text) == names
    assert rows_of(client.get("/schedules?sort=-name").text) == names[::-1]
    # Now is 2026-06-01 12:00Z: berlin-sync fires at 13:00 CEST (11:00Z)... the next hour.
    by_fire = ["berlin-sync", "berlin-report", "config-report", "london-report", "utc-poll"]
    page = client.get("/schedules?sort=next_fire").text
    assert rows_of(page) == by_fire  # paused (no next fire) last
    assert 'aria-sort="ascending"><a href="/schedules?sort=-next_fire"' in page
    assert rows_of(client.get("/schedules?sort=-next_fire").text) == by_fire[::-1]


def test_pages_go_forward_and_back_with_totals(
    clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    store.add_many(
        {"name": f"job-{index:03d}", "task": "t.noop", "schedule": every(60 + index)}
        for index in range(120)
    )
    first = client.get("/schedules").text
    assert totals(first) == "1-50 of 120"
    assert link(first, "previous-page") is None
    second_url = link(first, "next-page")
    assert second_url == "/schedules?after=job-049"
    second = client.get(second_url).text
    assert rows_of(second)[0] == "job-050"
    assert totals(second) == "51-100 of 120"
    third = client.get(link(second, "next-page") or "").text
    assert totals(third) == "101-120 of 120"
    assert link(third, "next-page") is None
    back = client.get(link(third, "previous-page") or "").text
    assert rows_of(back) == rows_of(second)
    assert totals(back) == "51-100 of 120"
    start = client.get(link(back, "previous-page") or "").text
    assert rows_of(start) == rows_of(first)
    assert link(start, "previous-page") is None
    assert link(start, "next-page") == "/schedules?after=job-049"

    # By next fire (the name breaking ties), with a filter.
    by_fire = client.get("/schedules?sort=next_fire&q=job-1").text
    assert totals(by_fire) == "1-20 of 20"
    names = [f"job-{index:03d}" for index in range(120)]
    fires = {name: store.get(name).next_fire_at for name in names}
    expected = sorted(names, key=lambda name: (fires[name], name))
    page = client.get("/schedules?sort=next_fire").text
    assert rows_of(page) == expected[:50]
    following = client.get(link(page, "next-page") or "").text
    assert rows_of(following) == expected[50:100]
    assert totals(following) == "51-100 of 120"
    previous = client.get(link(following, "previous-page") or "").text
    assert rows_of(previous) == rows_of(page)


def test_totals_are_capped_and_say_more_than(
    celery_app: Celery, clock: FrozenClock, store: ScheduleStore
) -> None:
    store.add_many(
        {"name": f"n{index}", "task": "t.noop", "schedule": every(60)} for index in range(8)
    )
    database = database_for(celery_app)
    with database.read() as conn:
        models = database.models
        assert count_schedules(conn, models, now=clock.now, cap=5) == Count(6)
        assert count_schedules(conn, models, now=clock.now, cap=50) == Count(8)
        before = Cursor("n5")
        assert count_schedules(conn, models, now=clock.now, before=before, cap=50) == Count(5)
        # A filter on a column without an index counts among the first `scan` rows only.
        task = ScheduleFilter(task="t.noop", search="n")
        assert count_schedules(conn, models, now=clock.now, where=task, scan=3) == Count(
            3, exact=False
        )
        assert count_schedules(conn, models, now=clock.now, where=task, scan=9) == Count(8)
    assert Span(50, 0, 312, at_least=True).summary() == f"1{EN_DASH}50 of at least 312"
    assert Span(50, 0, None).summary() == f"1{EN_DASH}50 of more than 10,000"
    assert Span(50, None, None).summary() == "50 shown of more than 10,000"
    assert Span(3, 0, 3).summary() == f"1{EN_DASH}3 of 3"


def test_a_zone_filter_scans_a_bounded_window_and_continues_after_it(
    celery_app: Celery, clock: FrozenClock, store: ScheduleStore
) -> None:
    store.add_many(
        {"name": f"a{index}", "task": "t.noop", "schedule": every(60)} for index in range(6)
    )
    store.add("z-berlin", "t.noop", cron("0 3 * * *", "Europe/Berlin"))
    database = database_for(celery_app)
    berlin = ScheduleFilter(zone="Europe/Berlin")
    with database.read() as conn:
        models = database.models
        first = schedule_rows(conn, models, now=clock.now, limit=10, where=berlin, scan=4)
        assert first.rows == []
        assert first.more
        assert first.window_full
        assert first.edge == Cursor("a3", first.edge.next_fire_at if first.edge else None)
        rest = schedule_rows(
            conn, models, now=clock.now, limit=10, where=berlin, scan=4, after=first.edge
        )
        assert [row["name"] for row in rest.rows] == ["z-berlin"]
        assert not rest.more


def test_the_runs_list_pages_both_ways_with_totals(
    celery_app: Celery, clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    store.add("every-minute", "t.noop", every(60))
    for index in range(60):
        at = clock.now + timedelta(minutes=index)
        insert_run(celery_app, "every-minute", at, task_id=f"run-{index}")
    first = client.get("/runs").text
    assert totals(first).startswith("1-50 of 60")
    newest = re.findall(r'<tr data-run="(\d+)">', first)
    assert len(newest) == 50
    assert int(newest[0]) > int(newest[-1])
    older = client.get(link(first, "next-page") or "").text
    assert totals(older).startswith("51-60 of 60")
    assert link(older, "next-page") is None
    back = client.get(link(older, "previous-page") or "").text
    assert re.findall(r'<tr data-run="(\d+)">', back) == newest
    assert link(back, "previous-page") is None
    # One schedule's runs follow its (schedule, nominal_at) index, paged the same way.
    mine = client.get("/runs?schedule=every-minute").text
    assert totals(mine).startswith("1-50 of 60")
    assert "12:59" in mine.split('<tr data-run="', 2)[1]  # the latest nominal time first
    assert client.get("/runs?after=x").status_code == 400


def test_the_api_filters_sorts_and_pages_like_the_page(
    celery_app: Celery, clock: FrozenClock, client: Client
) -> None:
    mixed(celery_app, clock)
    response = client.get("/api/schedules?task=t.report&sort=-name&limit=2")
    assert [s["name"] for s in response.json()] == ["london-report", "config-report"]
    assert response.headers["x-total-count"] == "3"
    following = re.search(r'<([^>]*)>; rel="next"', response.headers["link"])
    assert following is not None
    assert "task=t.report" in following.group(1)
    assert "sort=-name" in following.group(1)
    second = client.get(following.group(1))
    assert [s["name"] for s in second.json()] == ["berlin-report"]
    assert 'rel="prev"' in second.headers["link"]
    assert "next" not in second.headers["link"]
    zone = client.get("/api/schedules?zone=Europe/London&source=db")
    assert [s["name"] for s in zone.json()] == ["london-report"]
    assert "x-total-count" not in zone.headers  # a zone filter is not counted
    assert client.get("/api/schedules?state=nope").status_code == 400
    assert client.get("/api/schedules?after=nonsense&sort=next_fire").status_code == 400


def test_the_name_search_is_case_insensitive_and_takes_wildcards_literally(
    client: Client, store: ScheduleStore
) -> None:
    for name in ("Report_A", "reportXa", "100%-done", "a/b", "other"):
        store.add(name, "t.noop", every(60))
    assert rows_of(client.get("/schedules?q=REPORT").text) == ["Report_A", "reportXa"]
    assert rows_of(client.get("/schedules?q=t_a").text) == ["Report_A"]
    assert rows_of(client.get("/schedules", params={"q": "0%-"}).text) == ["100%-done"]
    assert rows_of(client.get("/schedules", params={"q": "a/b"}).text) == ["a/b"]


def test_a_search_that_matches_few_looks_at_a_window_and_goes_on_after_it(
    celery_app: Celery, clock: FrozenClock, store: ScheduleStore
) -> None:
    store.add_many(
        {"name": f"n{index}", "task": "t.noop", "schedule": every(60)} for index in range(6)
    )
    store.add("zz-wanted", "t.noop", every(60))
    database = database_for(celery_app)
    wanted = ScheduleFilter(search="WANTED", task="t.noop")
    with database.read() as conn:
        models = database.models
        first = schedule_rows(conn, models, now=clock.now, limit=2, where=wanted, scan=4)
        assert first.rows == []
        assert first.window_full
        assert first.edge is not None
        assert first.edge.name == "n3"
        rest = schedule_rows(
            conn, models, now=clock.now, limit=2, where=wanted, scan=4, after=first.edge
        )
        assert [row["name"] for row in rest.rows] == ["zz-wanted"]
        assert not rest.more
        # Backwards from the end, the same window rule.
        back = schedule_rows(
            conn,
            models,
            now=clock.now,
            limit=2,
            where=ScheduleFilter(task="t.noop"),
            scan=4,
            after=Cursor("zz-wanted"),
            backwards=True,
        )
        assert [row["name"] for row in back.rows] == ["n4", "n5"]
        assert back.more


def test_id_cursors_and_limits_refuse_what_is_not_an_ascii_id_naming_the_field(
    client: Client,
) -> None:
    # '²' and '١٢' pass str.isdigit; an id past 2**63-1 does not fit the column.
    bad = ("²", "١٢", "0", str(2**63), "-1", "x")
    for path, field in (
        ("/runs?after=", "after"),
        ("/runs?before=", "before"),
        ("/audit?before=", "before"),
        ("/audit?limit=", "limit"),
        ("/api/audit?before=", "before"),
        ("/api/audit?limit=", "limit"),
        ("/api/schedules?limit=", "limit"),
    ):
        for text in bad:
            response = client.get(path + text)
            assert response.status_code == 400, (path, text)
            assert f"{field}: expected" in response.text, (path, text)
    largest = str(2**63 - 1)
    assert client.get(f"/runs?after={largest}").status_code == 200
    assert client.get(f"/audit?before={largest}").status_code == 200
