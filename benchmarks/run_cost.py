#!/usr/bin/env python
"""What one GafferTask run costs the worker process and the database, no broker.

    python benchmarks/run_cost.py [--runs 3000] [--rounds 2]

Calls the worker's tracer (``celery.app.trace.build_tracer``, as a worker delivers a
message) in this process on ``task_overhead``'s ``gaffer`` task (a key, one row through
``self.session()``), after 100 runs to warm up, and prints per run: this process's CPU
(every thread: the end writer's and the heartbeat's included), the wall time, and the
transactions PostgreSQL committed for the run (``pg_stat_database.xact_commit`` of the
throwaway database, read after the queued ends are written; the counter is flushed a
moment after each commit, hence the pause). A plain task that writes its row commits 1;
the run's start record, its fenced commit and its end record are the rest.

Only 127.0.0.1: a throwaway PostgreSQL database ``gaffer_bench_<random>_cost``, dropped
at the end. Prints figures only: it has no target (exit 0).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import create_database, drop_database, new_database_name, pg_dsn  # noqa: E402

#: Seconds PostgreSQL may take to publish a backend's counters (stats_fetch_consistency).
STATS_PAUSE = 1.5


def commits(dbname: str) -> int:
    import psycopg

    with psycopg.connect(pg_dsn(dbname), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (dbname,)
        ).fetchone()
    return int(row[0]) if row else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)

    import task_overhead
    from celery.app.trace import build_tracer

    import celery_gaffer.store
    from celery_gaffer.runs.endings import end_writer

    dbname = new_database_name("cost")
    create_database(dbname)
    try:
        task_overhead.psql(dbname, task_overhead.ROWS_DDL)
        app = task_overhead.make_app(dbname)
        celery_gaffer.store.database_for(app).migrate()
        task = app.tasks[task_overhead.TASK_OF["gaffer"]]
        tracer = build_tracer(task.name, task, app=app, eager=False)
        n = 0

        def deliver(count: int) -> None:
            nonlocal n
            for _ in range(count):
                task_id = str(uuid.uuid4())
                request: dict[str, Any] = {
                    "id": task_id, "task": task.name, "hostname": "bench@cost",
                    "delivery_info": {}, "headers": {},
                }  # fmt: skip
                tracer(task_id, (), {"n": n, "tag": "cost"}, request)
                n += 1
            end_writer().write_in_order(lambda: None)  # the queued ends are written

        deliver(100)
        for r in range(args.rounds):
            time.sleep(STATS_PAUSE)
            before = commits(dbname)
            cpu, wall = time.process_time(), time.perf_counter()
            deliver(args.runs)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            time.sleep(STATS_PAUSE)
            committed = commits(dbname) - before
            print(
                f"round {r + 1}: {args.runs} runs; per run: process CPU "
                f"{1e6 * cpu / args.runs:,.0f} µs, wall {1e6 * wall / args.runs:,.0f} µs, "
                f"{committed / args.runs:.2f} transactions committed"
            )
        end_writer().close()
    finally:
        drop_database(dbname)
    return 0


if __name__ == "__main__":
    sys.exit(main())
