"""Bulk loading: ``ScheduleStore.add_many`` against plain psycopg writes of the same rows.

    .venv/bin/python benchmarks/load.py                 # 100,000 and 1,000,000 schedules
    .venv/bin/python benchmarks/load.py --sizes 100000  # one size

Per-tenant schedules, as they come in bulk: ``tenant-<i>`` sending ``t.report`` with
``kwargs={"tenant": i}``, a daily cron in one of four zones or an ``every`` of 1-5
minutes (400 distinct timings, shared as tenants share them). Measured side by side on
a throwaway PostgreSQL database, each size in a fresh table:

* **gaffer**: ``add_many`` (validation of every entry, first fires, the chunks written
  in one transaction each), entries made on the fly from the shared timings;
* **executemany**: the very rows gaffer wrote (read back, JSON as text, the table
  truncated) inserted by plain psycopg's ``cursor.executemany`` of one ``INSERT``, in
  pipeline mode (one round trip per transaction, not per row), one transaction per
  5,000 rows (add_many's chunks);
* **copy**: the same rows, the same transactions, with ``COPY ... FROM STDIN`` and
  psycopg's ``Copy.write_row``.

Prints rows/s and ratios; exits 1 when gaffer is below 0.5x the faster reference.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    create_database,
    drop_database,
    format_table,
    new_database_name,
    pg_dsn,
    pg_sqlalchemy_url,
)

TARGET = 0.5
CHUNK = 5000
ZONES = ("UTC", "Europe/London", "America/New_York", "Asia/Tokyo")


def timings() -> list[Any]:
    from celery_gaffer import cron, every

    crons = [cron(f"{m} {h} * * *", ZONES[(m + h) % 4]) for m in (0, 15, 30, 45) for h in range(24)]
    crons += [cron(f"{m} 3 * * *", z) for m in range(60) for z in ZONES][: 300 - len(crons)]
    return crons + [every(timedelta(seconds=60 + 2 * k)) for k in range(100)]


def entries(n: int, shared: list[Any]) -> Iterator[dict[str, Any]]:
    for i in range(n):
        yield {
            "name": f"tenant-{i}",
            "task": "t.report",
            "schedule": shared[i % len(shared)],
            "kwargs": {"tenant": i},
        }


def load_gaffer(url: str, n: int) -> float:
    from celery import Celery

    from celery_gaffer import ScheduleStore
    from celery_gaffer.store import database_for, dispose_engines

    app = Celery("load", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = url

    @app.task(name="t.report", shared=False)
    def report(tenant: int) -> None:
        return None

    database_for(app).migrate()
    store = ScheduleStore(app)
    shared = timings()
    gc.collect()
    started = time.perf_counter()
    added = store.add_many(entries(n, shared), chunk_size=CHUNK)
    elapsed = time.perf_counter() - started
    assert added == n
    dispose_engines()
    return elapsed


def read_rows(dbname: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    import psycopg

    with psycopg.connect(pg_dsn(dbname)) as conn:
        cur = conn.execute("SELECT * FROM gaffer_schedules ORDER BY id")
        names = [d.name for d in cur.description or ()]
        rows = cur.fetchall()
        conn.execute("TRUNCATE gaffer_schedules")
    keep = [i for i, name in enumerate(names) if name != "id"]
    json_columns = {"schedule", "args", "kwargs", "options"}
    out = []
    import json

    for row in rows:
        out.append(tuple(json.dumps(row[i]) if names[i] in json_columns else row[i] for i in keep))
    return [names[i] for i in keep], out


def load_executemany(dbname: str, columns: list[str], rows: list[tuple[Any, ...]]) -> float:
    """The rows with psycopg's ``executemany`` (pipelined where libpq can), one
    transaction per chunk."""
    import psycopg

    placeholders = ", ".join(["%s"] * len(columns))
    sql = f"INSERT INTO gaffer_schedules ({', '.join(columns)}) VALUES ({placeholders})"  # noqa: S608 - our own column names
    with psycopg.connect(pg_dsn(dbname)) as conn:
        started = time.perf_counter()
        with conn.pipeline():
            for start in range(0, len(rows), CHUNK):
                with conn.transaction(), conn.cursor() as cur:
                    cur.executemany(sql, rows[start : start + CHUNK])
        elapsed = time.perf_counter() - started
        conn.execute("TRUNCATE gaffer_schedules")
        conn.commit()
    return elapsed


def load_copy(dbname: str, columns: list[str], rows: list[tuple[Any, ...]]) -> float:
    import psycopg

    with psycopg.connect(pg_dsn(dbname)) as conn:
        started = time.perf_counter()
        for start in range(0, len(rows), CHUNK):
            statement = f"COPY gaffer_schedules ({', '.join(columns)}) FROM STDIN"
            with conn.transaction(), conn.cursor() as cur, cur.copy(statement) as copy:
                for row in rows[start : start + CHUNK]:
                    copy.write_row(row)
        elapsed = time.perf_counter() - started
        conn.execute("TRUNCATE gaffer_schedules")
        conn.commit()
    return elapsed


def measure(n: int) -> dict[str, float]:
    dbname = new_database_name(f"load{n}")
    create_database(dbname)
    try:
        gaffer = load_gaffer(pg_sqlalchemy_url(dbname), n)
        columns, rows = read_rows(dbname)
        executemany = load_executemany(dbname, columns, rows)
        copy = load_copy(dbname, columns, rows)
    finally:
        drop_database(dbname)
    return {"gaffer": gaffer, "executemany": executemany, "copy": copy}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    args = parser.parse_args(argv)
    table = []
    missed = False
    for n in (int(s) for s in args.sizes.split(",")):
        times = measure(n)
        fastest = min(times["executemany"], times["copy"])
        ratio = fastest / times["gaffer"]
        missed |= ratio < TARGET
        table.append(
            (
                f"{n:,}",
                f"{n / times['gaffer']:,.0f}",
                f"{n / times['executemany']:,.0f}",
                f"{n / times['copy']:,.0f}",
                f"{times['executemany'] / times['gaffer']:.2f}x",
                f"{times['copy'] / times['gaffer']:.2f}x",
                f"{ratio:.2f}x",
            )
        )
        print(
            f"N={n:,}: gaffer {times['gaffer']:.1f} s, executemany {times['executemany']:.1f} s, "
            f"copy {times['copy']:.1f} s",
            flush=True,
        )
    print(
        format_table(
            (
                "schedules",
                "gaffer rows/s",
                "executemany rows/s",
                "copy rows/s",
                "vs executemany",
                "vs copy",
                "vs faster",
            ),
            table,
        )
    )
    print(f"target: gaffer >= {TARGET}x the faster reference: {'MISSED' if missed else 'met'}")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
