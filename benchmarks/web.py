"""The web console at 100,000 schedules: its first pages against the plain SQL of the same page,
then every page and API call.

    .venv/bin/python benchmarks/web.py                 # 100,000 schedules, ~1 min
    .venv/bin/python benchmarks/web.py --schedules 10000 --requests 20
    .venv/bin/python benchmarks/web.py --schedules 1000000 --runs 10000000 --requests 20
    make bench-web

In a throwaway PostgreSQL database, ``--schedules`` schedules are stored with
``ScheduleStore.add_many`` (every tenth a cron schedule in Europe/London, every
hundredth paused), with two run records each, then ``VACUUM ANALYZE``. A real
``celery -A benchproj gaffer web`` process (uvicorn) serves them; this script asks it for
each page ``--requests`` times over one keep-alive HTTP connection, after 5 requests of
warm-up, and takes the median wall time of a whole response (status line to last byte).
The pages: the first, one from the middle (``after=``), ``state=paused``, a search by
name (the list reads at most 20,000 names a page for it, so this one matches early), and
the first again once every row's stored health word is stale (Beat stopped a day ago), so the
console evaluates each row of the page with Beat's rules.

The reference is the plain SQL of the same page, run the same number of times over one
psycopg connection and fetched whole: ``SELECT * FROM gaffer_schedules ORDER BY name
LIMIT 50`` (with the page's ``WHERE``, if any). The console does more than that query
(each row's latest run, health, next fires in words, the HTML), so the ratio says what
that costs, and the absolute time says whether it stays small.

Then every page and GET API call of the console (the overview, lists with each filter
and sort, a schedule, a run, the audit log, a bulk preview...) is asked for
``--every-requests`` times. Runs (``--runs``, two per schedule by default) and as many
fires are spread over the last 30 days, one in ten failed with a traceback; every
hundredth schedule has two audit entries; two Beats are registered.

Exits 1 when the first page of ``/schedules`` or ``/api/schedules`` takes 100 ms or more
(median), or any page or call takes more than 100 ms or is larger than 200 KiB.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import (
    create_database,
    drop_database,
    format_table,
    median,
    new_database_name,
    pg_dsn,
    pg_sqlalchemy_url,
)

ROOT = Path(__file__).resolve().parents[1]
UTC = timezone.utc
TASK = "benchproj.report"
PAGE = 50
#: Days the run records and fires are spread over (the default retention).
RUN_DAYS = 30
TRACEBACK = (
    "Traceback (most recent call last):\n"
    + '  File "/srv/app/bank.py", line 42, in fetch\n    return client.get(url)\n' * 20
    + "TimeoutError: the bank API timed out"
)
TARGET_MS = 100.0
#: Largest page (KiB).
PAGE_KB = 200
WARM_UP = 5
PROJECT = f"""
import os
from celery import Celery

app = Celery("benchproj", broker="memory://")
app.conf.gaffer_database_url = os.environ["BENCH_DATABASE"]


@app.task(name={TASK!r})
def report():
    return None
"""
STARTED = re.compile(r"Gaffer console on http://127\.0\.0\.1:(\d+)/")
# One column list for every reference query: the page's rows, whole.
SELECT_PAGE = "SELECT * FROM gaffer_schedules"


def load(database: str, count: int, runs: int) -> None:
    """``count`` schedules through ``add_many``, ``runs`` run records and as many fires
    spread over the last 30 days (the default retention), audit entries, two Beats; then
    VACUUM ANALYZE."""
    import psycopg
    from celery import Celery

    from celery_gaffer import ScheduleStore, cron, every
    from celery_gaffer.store import database_for
    from celery_gaffer.store.models import models_for
    from celery_gaffer.store.partitions import ensure

    app = Celery("bench", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = pg_sqlalchemy_url(database)
    database_for(app).migrate()
    now = datetime.now(UTC)
    with database_for(app).begin() as conn:
        # The weeks the runs and fires fall in, as Beat makes them ahead of time.
        ensure(conn, models_for("gaffer_"), now, since=now - timedelta(days=RUN_DAYS + 7))
    base = now + timedelta(hours=1)
    entries = (
        {
            "name": f"tenant-{i:07d}",
            "task": TASK if i % 7 else f"{TASK}_weekly",
            "schedule": (
                cron(f"{i % 60} {i % 24} * * *", "Europe/London")
                if i % 10 == 0
                else every(86400, anchor=base + timedelta(seconds=i % 86400))
            ),
            "kwargs": {"tenant": i},
        }
        for i in range(count)
    )
    ScheduleStore(app, check_tasks=False).add_many(entries)
    with psycopg.connect(pg_dsn(database), autocommit=True) as conn:
        conn.execute("UPDATE gaffer_schedules SET enabled = false WHERE name LIKE '%00'")
        # The runs, as the run recorder writes them, spread evenly over the last 30 days
        # (newest first by id too); every tenth failed, with a traceback. Each schedule's
        # latest run is among the newest ``count``.
        conn.execute(
            """
            INSERT INTO gaffer_job_runs (task_id, task_name, schedule, nominal_at, key,
                attempt, state, started_at, finished_at, duration, worker, error_type,
                error_message, traceback, args, kwargs, updated_at, created_at)
            SELECT 'bench-' || r.n, %(task)s, 'tenant-' || lpad((r.n %% %(count)s)::text, 7, '0'),
                t.at, 'k-' || r.n, 1,
                CASE WHEN r.n %% 10 = 0 THEN 'failed' ELSE 'succeeded' END,
                t.at, t.at + interval '1.5 seconds', 1.5, 'celery@bench',
                CASE WHEN r.n %% 10 = 0 THEN 'TimeoutError' END,
                CASE WHEN r.n %% 10 = 0 THEN 'the bank API timed out' END,
                CASE WHEN r.n %% 10 = 0 THEN %(traceback)s END,
                '[]', json_build_object('tenant', r.n %% %(count)s),
                t.at, t.at
            FROM generate_series(1, %(runs)s) AS r(n)
            CROSS JOIN LATERAL (SELECT now() - make_interval(
                secs => (%(runs)s - r.n) * %(spacing)s)) AS t(at)
            """,
            {
                "task": TASK,
                "count": count,
                "runs": runs,
                "spacing": RUN_DAYS * 86400 / max(runs, 1),
                "traceback": TRACEBACK,
            },
        )
        # One fire in the ledger per run, at the run's nominal time.
        conn.execute(
            """
            INSERT INTO gaffer_fires (schedule, nominal_at, key, task_id, kind, state,
                publish_after, publish_count, created_at, sent_at)
            SELECT schedule, nominal_at, key, task_id, 'scheduled', 'sent', nominal_at, 1,
                nominal_at, nominal_at
            FROM gaffer_job_runs
            ON CONFLICT DO NOTHING
            """
        )
        # A history of changes: a pause and a resume of every hundredth schedule.
        conn.execute(
            """
            INSERT INTO gaffer_audit (at, actor, source, action, schedule, note, changes)
            SELECT now() - make_interval(hours => a.n % 700), 'alice', 'console',
                CASE a.n % 2 WHEN 0 THEN 'pause' ELSE 'resume' END, s.name,
                'maintenance window', '{"enabled": [true, false]}'
            FROM gaffer_schedules s CROSS JOIN generate_series(1, 2) AS a(n)
            WHERE s.name LIKE '%00'
            """
        )
        conn.execute(
            """
            INSERT INTO gaffer_beats (name, host, pid, started_at, last_tick_at)
            VALUES ('bench-a:1', 'bench-a', 1, now() - interval '1 day', now()),
                   ('bench-b:2', 'bench-b', 2, now() - interval '1 day', now())
            """
        )
        for table in ("schedules", "job_runs", "fires", "audit", "beats"):
            conn.execute(f"VACUUM ANALYZE gaffer_{table}")


class Console:
    """A real ``celery gaffer web`` process on a free port, and a keep-alive client."""

    def __init__(self, database: str, folder: Path) -> None:
        (folder / "benchproj.py").write_text(PROJECT)
        env = {
            **os.environ,
            "BENCH_DATABASE": pg_sqlalchemy_url(database),
            "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)]),
            "PYTHONUNBUFFERED": "1",
        }
        env.pop("GAFFER_WEB_TOKEN", None)
        self.log = folder / "web.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "benchproj", "gaffer", "web", "--port", "0"],
            cwd=folder,
            env=env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.port = self._wait_for_port()
        self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def _wait_for_port(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = STARTED.search(self.log.read_text(errors="replace"))
            if found:
                return int(found.group(1))
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the console did not start:\n{self.log.read_text()[-3000:]}")

    def get(self, path: str) -> bytes:
        try:
            self.connection.request("GET", path)
            response = self.connection.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            # The server closed the idle keep-alive connection (uvicorn: after 5 s).
            self.connection.close()
            self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            self.connection.request("GET", path)
            response = self.connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status} {body[:300]!r}")
        return body

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def timed(call: Callable[[], Any], requests: int) -> tuple[list[float], Any]:
    """Milliseconds of each of ``requests`` calls after the warm-up; the last result."""
    result = None
    for _ in range(WARM_UP):
        result = call()
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        result = call()
        times.append((time.perf_counter() - started) * 1000)
    return times, result


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure(database: str, console: Console, count: int, requests: int) -> list[dict[str, Any]]:
    import psycopg
    from psycopg.rows import dict_row

    middle = f"tenant-{count // 2:07d}"
    # A search the list answers from its first window of names (it reads at most 20,000
    # a page for an unindexed filter; a rarer match is found page by page).
    early = "-00001"
    cases = [
        # (what, page path, API path, the plain SQL's WHERE and parameters)
        ("first page", "/schedules", "/api/schedules", "", {}),
        (
            "a page from the middle (after=)",
            f"/schedules?after={middle}",
            f"/api/schedules?after={middle}",
            "WHERE name > %(after)s",
            {"after": middle},
        ),
        (
            "state=paused",
            "/schedules?state=paused",
            "/api/schedules?state=paused",
            "WHERE error IS NULL AND NOT enabled",
            {},
        ),
        (
            f"q={early} (100 names)",
            f"/schedules?q={early}",
            f"/api/schedules?q={early}",
            "WHERE name ILIKE %(q)s",
            {"q": f"%{early}%"},
        ),
        ("first page, every health word stale", "/schedules", "/api/schedules", "", {}),
    ]
    rows = []
    with psycopg.connect(pg_dsn(database), autocommit=True, row_factory=dict_row) as conn:
        for number, (what, page, api, where, parameters) in enumerate(cases):
            if number == len(cases) - 1:
                # Beat stopped long ago: no stored health word is current any more, so
                # the console evaluates every row of the page with Beat's rules.
                conn.execute("UPDATE gaffer_schedules SET check_at = now() - interval '1 day'")
                conn.execute("VACUUM ANALYZE gaffer_schedules")
            sql = f"{SELECT_PAGE} {where} ORDER BY name LIMIT {PAGE}"
            sql_ms, fetched = timed(
                lambda sql=sql, parameters=parameters: conn.execute(sql, parameters).fetchall(),
                requests,
            )
            page_ms, html = timed(lambda page=page: console.get(page), requests)
            api_ms, body = timed(lambda api=api: console.get(api), requests)
            shown = html.count(b"<tr data-schedule=")
            listed = json.loads(body)
            if not (len(fetched) == shown == len(listed) >= 1):
                raise RuntimeError(
                    f"{what}: SQL {len(fetched)} rows, page {shown}, API {len(listed)}"
                )
            if [row["name"] for row in listed] != [row["name"] for row in fetched]:
                raise RuntimeError(f"{what}: the API's names differ from the SQL's")
            rows.append(
                {
                    "what": what,
                    "sql": median(sql_ms),
                    "page": median(page_ms),
                    "page_p90": percentile(page_ms, 0.9),
                    "page_kb": len(html) / 1024,
                    "api": median(api_ms),
                    "api_p90": percentile(api_ms, 0.9),
                }
            )
    return rows


def every_page(database: str, console: Console, count: int, requests: int) -> list[dict[str, Any]]:
    """Every page and GET API call of the console, each ``requests`` times: the median
    and p90 of its wall time and its size."""
    import psycopg

    middle = f"tenant-{count // 2:07d}"
    audited = f"tenant-{(count // 3) // 100 * 100:07d}"
    with psycopg.connect(pg_dsn(database), autocommit=True) as conn:
        # Beat running: each row's stored health word current (as the load left it; a
        # database kept after the stale case gets it back).
        conn.execute(
            "UPDATE gaffer_schedules SET check_at = next_fire_at"
            " WHERE check_at IS DISTINCT FROM next_fire_at"
        )
        conn.execute("VACUUM ANALYZE gaffer_schedules")
        run = conn.execute(
            "SELECT id FROM gaffer_job_runs WHERE schedule = %s ORDER BY id DESC LIMIT 1",
            (middle,),
        ).fetchone()
        failed = conn.execute(
            "SELECT id FROM gaffer_job_runs WHERE state = 'failed' ORDER BY id DESC LIMIT 1"
        ).fetchone()
    if run is None or failed is None:
        raise RuntimeError("the loaded database has no runs")
    paths = [
        "/",
        "/schedules",
        f"/schedules?after={middle}",
        f"/schedules?before={middle}",
        "/schedules?sort=next_fire",
        "/schedules?sort=-next_fire",
        "/schedules?state=paused",
        "/schedules?state=late",
        f"/schedules?task={TASK}_weekly",
        "/schedules?zone=Europe/London",
        "/schedules?source=db",
        f"/schedules/{middle}",
        f"/schedules/{audited}",
        "/runs",
        "/runs?state=failed",
        f"/runs?schedule={middle}",
        f"/runs/{failed[0]}",
        f"/runs/{run[0]}",
        "/alerts",
        "/audit",
        f"/audit?schedule={audited}",
        "/audit?actor=alice",
        f"/bulk?action=resume&name={audited}&name={middle}",
        "/api/overview",
        "/api/schedules",
        "/api/schedules?zone=Europe/London&sort=next_fire",
        f"/api/schedules/{middle}",
        "/api/runs",
        "/api/runs?state=failed",
        f"/api/runs/{failed[0]}",
        "/api/alerts",
        "/api/audit",
        f"/api/audit?schedule={audited}",
    ]
    rows = []
    for path in paths:
        times, body = timed(lambda path=path: console.get(path), requests)
        rows.append(
            {
                "path": path,
                "median": median(times),
                "p90": percentile(times, 0.9),
                "kb": len(body) / 1024,
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument(
        "--runs", type=int, default=None, help="run records (default: two per schedule)"
    )
    parser.add_argument("--requests", type=int, default=50, help="timed requests per figure")
    parser.add_argument(
        "--every-requests", type=int, default=10, help="timed requests per page of the tour"
    )
    parser.add_argument(
        "--keep", action="store_true", help="leave the loaded database (its name is printed)"
    )
    parser.add_argument(
        "--reuse", metavar="DATABASE", help="measure a database --keep left (no loading)"
    )
    args = parser.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    database = args.reuse or new_database_name("web")
    if args.reuse is None:
        create_database(database)
    try:
        if args.reuse is None:
            started = time.perf_counter()
            runs = 2 * args.schedules if args.runs is None else args.runs
            load(database, args.schedules, runs)
            print(
                f"{args.schedules:,} schedules and {runs:,} runs stored in "
                f"{time.perf_counter() - started:.1f} s",
                flush=True,
            )
        with tempfile.TemporaryDirectory(prefix="gaffer-bench-web-") as folder:
            console = Console(database, Path(folder))
            try:
                pages = every_page(database, console, args.schedules, args.every_requests)
                results = measure(database, console, args.schedules, args.requests)
                # After the stale case: Beat stopped a day ago, no health word current.
                stale_alerts = timed(lambda: console.get("/api/alerts"), args.every_requests)[0]
            finally:
                console.stop()
    finally:
        if args.keep or args.reuse:
            print(f"database kept: --reuse {database}", flush=True)
        else:
            drop_database(database)
    print()
    print(
        f"median of {args.requests} requests (ms), {PAGE} schedules a page, "
        f"{args.schedules:,} schedules:"
    )
    print(
        format_table(
            [
                "page",
                "plain SQL",
                "/schedules",
                "p90",
                "ratio",
                "KiB",
                "/api/schedules",
                "p90",
                "ratio",
            ],
            [
                [
                    r["what"],
                    f"{r['sql']:.2f}",
                    f"{r['page']:.1f}",
                    f"{r['page_p90']:.1f}",
                    f"{r['page'] / r['sql']:.1f}x",
                    f"{r['page_kb']:.0f}",
                    f"{r['api']:.1f}",
                    f"{r['api_p90']:.1f}",
                    f"{r['api'] / r['sql']:.1f}x",
                ]
                for r in results
            ],
        )
    )
    print()
    print(f"every page and API call, median of {args.every_requests} requests (ms):")
    print(
        format_table(
            ["path", "median", "p90", "KiB"],
            [[p["path"], f"{p['median']:.1f}", f"{p['p90']:.1f}", f"{p['kb']:.0f}"] for p in pages],
        )
    )
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"/api/alerts once Beat has been stopped a day (every health word stale): "
        f"{median(stale_alerts):.1f} ms median (not a target: the console then evaluates "
        "schedules with Beat's rules until it finds 50 alerting, and the overview's banner "
        "says Beat is down)"
    )
    slow = [p["path"] for p in pages if p["median"] > TARGET_MS]
    heavy = [p["path"] for p in pages if p["kb"] > PAGE_KB]
    if slow or heavy:
        for path in slow:
            print(f"target missed: {path} took more than {TARGET_MS:.0f} ms (median)")
        for path in heavy:
            print(f"target missed: {path} is larger than {PAGE_KB} KiB")
        return 1
    first = results[0]
    missed = [name for name in ("page", "api") if first[name] >= TARGET_MS]
    if missed:
        print(
            f"target missed: the first page of {', '.join(missed)} took {TARGET_MS:.0f} ms or more"
        )
        return 1
    print(f"target met: the first pages answer in under {TARGET_MS:.0f} ms (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
