"""The Django admin of the Gaffer tables at 100,000 schedules: its changelist pages
against the plain SQL of the same page.

    .venv/bin/python benchmarks/django_admin.py                 # 100,000 schedules, ~1 min
    .venv/bin/python benchmarks/django_admin.py --schedules 10000 --requests 20

In a throwaway PostgreSQL database, the schedules, run records and audit entries of
``web.py``'s load (``ScheduleStore.add_many``, then bulk SQL, then ``VACUUM ANALYZE``),
and Django's own tables (``migrate``) beside them. Django is configured in this process
with ``celery_gaffer.contrib.django`` and ``gaffer_database_url = "django://default"``;
a superuser asks Django's test Client (the whole request: middleware, session, admin
view, template) for each page ``--requests`` times; the median wall
time is reported (web.py's ``timed``: 5 requests of warm-up first).

The reference is the plain SQL of the same page over one psycopg connection, fetched
whole: ``SELECT * FROM gaffer_schedules ORDER BY name LIMIT 100`` (with the page's
``WHERE`` and ``OFFSET``). Exits 1 when a schedules page takes 200 ms or more (median).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import (
    create_database,
    drop_database,
    format_table,
    median,
    new_database_name,
    pg_dsn,
)
from celery import Celery
from web import load, timed

PAGE = 100
TARGET_MS = 200.0

app = Celery("bench-django", broker="memory://", set_as_current=False)
app.conf.gaffer_database_url = "django://default"
urlpatterns: list[Any] = []


def configure(database: str) -> None:
    import django
    from django.conf import settings

    settings.configure(
        SECRET_KEY="benchmark-only",
        ALLOWED_HOSTS=["testserver"],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": database,
                "USER": "postgres",
                "HOST": "127.0.0.1",
                "PORT": 5432,
            }
        },
        INSTALLED_APPS=[
            "django.contrib.admin",
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "celery_gaffer.contrib.django",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        ROOT_URLCONF=__name__,
        TEMPLATES=[
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {
                    "context_processors": [
                        "django.template.context_processors.request",
                        "django.contrib.auth.context_processors.auth",
                        "django.contrib.messages.context_processors.messages",
                    ]
                },
            }
        ],
        USE_TZ=True,
        GAFFER_CELERY_APP=f"{__name__}:app",
    )
    django.setup()
    from django.contrib import admin
    from django.urls import path

    urlpatterns.append(path("admin/", admin.site.urls))


def measure(database: str, count: int, requests: int) -> list[dict[str, Any]]:
    import psycopg
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", verbosity=0)
    user = User.objects.create_superuser("bench", "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    middle = count // PAGE // 2
    schedules = "SELECT * FROM gaffer_schedules {} ORDER BY name LIMIT %(limit)s OFFSET %(offset)s"
    newest = "SELECT * FROM gaffer_{} ORDER BY id DESC LIMIT %(limit)s"
    cases = [
        # (what, admin path, the plain SQL of the same page, its OFFSET)
        ("schedules, first page", "/admin/gaffer/schedule/", schedules.format(""), 0),
        (
            f"schedules, page {middle}",
            f"/admin/gaffer/schedule/?p={middle}",
            schedules.format(""),
            middle * PAGE,
        ),
        (
            "schedules, state=paused",
            "/admin/gaffer/schedule/?state=paused",
            schedules.format("WHERE error IS NULL AND NOT enabled"),
            0,
        ),
        (
            "schedules, search q=tenant-00012",
            "/admin/gaffer/schedule/?q=tenant-00012",
            schedules.format("WHERE upper(name) LIKE upper('%%tenant-00012%%')"),
            0,
        ),
        ("runs, first page", "/admin/gaffer/jobrun/", newest.format("job_runs"), 0),
        ("audit log, first page", "/admin/gaffer/auditentry/", newest.format("audit"), 0),
    ]
    rows = []
    with psycopg.connect(pg_dsn(database), autocommit=True) as conn:
        for what, url, sql, offset in cases:
            parameters = {"limit": PAGE, "offset": offset}
            sql_ms, fetched = timed(
                lambda sql=sql, parameters=parameters: conn.execute(sql, parameters).fetchall(),
                requests,
            )
            page_ms, response = timed(lambda url=url: client.get(url), requests)
            if response.status_code != 200 or not fetched:
                raise RuntimeError(f"{what}: status {response.status_code}, {len(fetched)} rows")
            rows.append(
                {
                    "what": what,
                    "sql": median(sql_ms),
                    "page": median(page_ms),
                    "page_kb": len(response.content) / 1024,
                }
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=30, help="timed requests per figure")
    args = parser.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    database = new_database_name("djadmin")
    create_database(database)
    try:
        started = time.perf_counter()
        load(database, args.schedules, 2 * args.schedules)
        print(f"{args.schedules:,} schedules stored in {time.perf_counter() - started:.1f} s")
        configure(database)
        results = measure(database, args.schedules, args.requests)
        from django.db import connections

        connections.close_all()
    finally:
        from celery_gaffer.store import dispose_engines

        dispose_engines()
        drop_database(database)
    print()
    print(
        f"median of {args.requests} requests (ms), {PAGE} rows a page, "
        f"{args.schedules:,} schedules:"
    )
    print(
        format_table(
            ["page", "plain SQL", "admin page", "ratio", "KiB"],
            [
                [
                    row["what"],
                    f"{row['sql']:.2f}",
                    f"{row['page']:.1f}",
                    f"{row['page'] / max(row['sql'], 0.001):.0f}x",
                    f"{row['page_kb']:.0f}",
                ]
                for row in results
            ],
        )
    )
    slow = [
        row["what"]
        for row in results
        if row["what"].startswith("schedules") and row["page"] >= TARGET_MS
    ]
    if slow:
        print(f"FAIL: {', '.join(slow)} at or above {TARGET_MS:.0f} ms")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
