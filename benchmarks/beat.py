#!/usr/bin/env python
"""Beat at scale: celery-gaffer against celery-redbeat, django-celery-beat and bare send_task.

    python benchmarks/beat.py [--sizes 10000,100000,1000000] [--quick]

For each N, N schedules (``every(86400)`` with anchors spread over the day, none due in
the next hour) are stored through ``ScheduleStore.add_many`` (timed), then a fresh Beat
process measures:

* start-up: ``Scheduler(app)`` (non-lazy, i.e. ``setup_schedule``) plus the first tick;
* idle tick: median ``tick()`` while nothing is due;
* peak RSS of that process (``ru_maxrss``), after start-up and idle ticks, and after
  the dispatch below;
* dispatch rate: 10,000 of the N schedules are made due at once by an SQL ``UPDATE``
  (watermark one day back, ``next_fire_at`` one second back, so each has exactly one
  due fire) and ``tick()`` is called back to back until all 10,000 messages are in the
  Redis broker; rate = messages / seconds.

At N <= 100,000 (by default) celery-redbeat and django-celery-beat do the same: redbeat
entries are ``RedBeatSchedulerEntry(...).save()``-d into Redis and made due by moving
their ``last_run_at`` back a day; django-celery-beat rows are bulk-created in its own
PostgreSQL database and made due by an ``UPDATE`` of ``last_run_at`` plus
``PeriodicTasks.update_changed()`` (the way it notices edits). The bare rate of an
``app.send_task`` loop to the same broker is the physical limit. Beside Gaffer's dispatch,
each repetition also times :class:`LedgerFloor`, the least a database-backed fire-once
ledger does, written by hand on psycopg in the same database (read the due rows, claim
their fires, move them on, publish as Gaffer does, mark them sent): the floor under
Gaffer's ratio to the batched loop.

Every measured process is a fresh interpreter. Only 127.0.0.1 is used: PostgreSQL
databases named ``gaffer_bench_<random>_*`` (dropped at the end, even on failure) and
Redis DBs 12 (broker), 13 (redbeat), 14 (unused), flushed at start and end.
Benchmark-only packages: celery-redbeat, django-celery-beat (and Django); they are not
dependencies of celery-gaffer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from datetime import datetime, timedelta, timezone
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import (
    PG_HOST,
    PG_PORT,
    PG_USER,
    WorkerFailed,
    create_database,
    drop_database,
    emit_result,
    flush_redis,
    format_table,
    median,
    new_database_name,
    peak_rss_mb,
    pg_dsn,
    pg_sqlalchemy_url,
    redis_client,
    redis_url,
    run_worker,
)

SCRIPT = os.path.abspath(__file__)
TASK = "bench.noop"
BROKER_DB = 12
REDBEAT_DB = 13
QUEUE = "celery"  # Celery's default queue: a Redis list of that name in the broker DB
DAY = 86_400
LEAD = 3_600  # no schedule's next fire is within the first hour after it is stored
SPREAD = 82_000  # next fires spread over [LEAD, LEAD + SPREAD) seconds
DUE = 10_000  # fires made due at once for the dispatch measurement
BATCH = 250  # messages per kombu publish batch in the batched bare loop (as gaffer sends)
COMPETITOR_MAX_N = 100_000

TARGET_GAFFER_VS_BARE = 0.8
# Against the bare loop that publishes in the same kombu batches: the ledger at most a
# third of the cost of a fire.
TARGET_GAFFER_VS_BATCHED = 0.75
TARGET_GAFFER_VS_REDBEAT = 1.2
TARGET_STARTUP_S = 0.5
TARGET_IDLE_MS = 2.0
TARGET_RSS_MB = 100.0
TARGET_AT_N = 1_000_000


# ==== worker side (each runs in a fresh interpreter) ================================


def make_app(**conf: Any) -> Any:
    from celery import Celery

    app = Celery("bench", broker=redis_url(BROKER_DB), set_as_current=True)
    app.conf.update(
        result_expires=None,  # no celery.backend_cleanup default entry in any scheduler
        beat_schedule={},
        broker_connection_retry_on_startup=False,
        timezone="UTC",
        enable_utc=True,
        **conf,
    )

    @app.task(name=TASK, shared=False)
    def noop(*args: Any, **kwargs: Any) -> None:
        return None

    return app


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def _profiler(params: dict[str, Any]) -> Any:
    if not params.get("profile_dir"):
        return None
    import cProfile

    return cProfile.Profile()


def _dump(profiler: Any, params: dict[str, Any], phase: str) -> None:
    if profiler is not None:
        path = os.path.join(params["profile_dir"], f"{params['label']}_{phase}.pstats")
        profiler.dump_stats(path)


class _Phase:
    """Profile one phase into its own file when profiling was asked for."""

    def __init__(self, params: dict[str, Any], phase: str) -> None:
        self.params, self.phase, self.profiler = params, phase, _profiler(params)

    def __enter__(self) -> _Phase:
        if self.profiler is not None:
            self.profiler.enable()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.profiler is not None:
            self.profiler.disable()
            _dump(self.profiler, self.params, self.phase)


def _idle_ticks(tick: Any, count: int, seconds: float) -> list[float]:
    """Wall-clock durations of up to ``count`` ticks (at most about ``seconds`` in all)."""
    durations: list[float] = []
    stop_at = time.perf_counter() + seconds
    for _ in range(count):
        started = time.perf_counter()
        tick()
        durations.append(time.perf_counter() - started)
        if time.perf_counter() > stop_at:
            break
    return durations


def _dispatch(tick: Any, expected: int, cap_s: float) -> dict[str, Any]:
    """Call ``tick`` back to back until ``expected`` messages are in the broker (or cap)."""
    broker = redis_client(BROKER_DB)
    ticks = 0
    cpu_started = time.process_time()
    started = time.perf_counter()
    queued = 0
    while True:
        tick()
        ticks += 1
        queued = int(broker.llen(QUEUE))
        elapsed = time.perf_counter() - started
        if queued >= expected or elapsed > cap_s:
            break
    return {
        "due": expected,
        "queued": queued,
        "dispatch_s": elapsed,
        "rate": queued / elapsed if elapsed > 0 else None,
        "complete": queued >= expected,
        "dispatch_ticks": ticks,
        # CPU of the Beat process alone (not PostgreSQL's nor Redis's): steadier than wall
        # time on a shared machine.
        "cpu_us_per_fire": 1e6 * (time.process_time() - cpu_started) / max(queued, 1),
    }


def _stride(n: int, due: int) -> int:
    return max(1, n // due)


def _subset(n: int, due: int, rep: int) -> tuple[int, int, bool]:
    """``(stride, offset, fresh)``: repetition ``rep`` makes due ids ``= offset mod stride``.

    Repetitions use disjoint schedules while there are enough (``fresh``); at N = 10,000
    every repetition reuses the same ones.
    """
    stride = _stride(n, due)
    fresh = rep < stride
    return stride, (rep if fresh else 0), fresh


BARE_HEADERS = {
    "celery_beat_task": True,
    "gaffer_schedule": "tenant-0000000",
    "gaffer_nominal_at": "2030-01-01T00:00:00Z",
    "gaffer_key": "tenant-0000000@2030-01-01T00:00:00Z",
}


class BareSender:
    """``app.send_task`` in a loop, the way a Beat sends: one Producer(auto_declare=False)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.connection = app.connection_for_write()
        self.connection.ensure_connection(max_retries=3)
        self.producer = app.amqp.Producer(self.connection, auto_declare=False)
        self.broker = redis_client(BROKER_DB)

    def rate(
        self, n: int, *, pool: bool = False, batch: bool = False, as_gaffer: bool = False
    ) -> float:
        """Messages/s of the loop; ``batch``: in kombu publish batches of BATCH messages;
        ``as_gaffer``: each batch inside gaffer's ``declared_once`` (the queue goes to
        kombu's declaration cache once a batch) and each message with the reprs and
        origin computed once (``message_defaults``), as gaffer publishes."""
        from contextlib import nullcontext
        from uuid import uuid4

        extra: dict[str, Any] = {}
        if as_gaffer:
            from celery_gaffer.beat.publisher import declared_once, message_defaults
            from celery_gaffer.store.schedules import Payload

            extra = message_defaults(self.app)(Payload(TASK, [], {}, {}))

        app, producer = self.app, None if pool else self.producer
        if pool:
            app.send_task(TASK)  # warm the producer pool
        self.broker.delete(QUEUE)
        cpu_started = time.process_time()
        started = time.perf_counter()
        step = BATCH if batch else n
        for first in range(0, n, step):
            with (
                producer.batch(max_size=10_000) if batch else nullcontext(),
                declared_once(producer) if as_gaffer else nullcontext(),
            ):
                for _ in range(min(step, n - first)):
                    app.send_task(
                        TASK,
                        args=[],
                        kwargs={},
                        task_id=str(uuid4()),
                        producer=producer,
                        headers=dict(BARE_HEADERS),
                        **extra,
                    )
        elapsed = time.perf_counter() - started
        self.cpu_us_per_send = 1e6 * (time.process_time() - cpu_started) / n
        _drain(self.broker, n, "bare loop")
        return n / elapsed


def _drain(broker: Any, expected: int, what: str) -> None:
    """Empty the queue; raise unless ``expected`` messages had reached it."""
    queued = int(broker.llen(QUEUE))
    broker.delete(QUEUE)
    if queued != expected:
        raise RuntimeError(f"{what}: {queued} of {expected} messages reached the broker")


class LedgerFloor:
    """The least a database-backed fire-once ledger does, written by hand on psycopg.

    Its own two tables in the benchmark's database: ``floor_schedules`` (``n`` rows, an
    index on the next fire) and ``floor_fires`` (the ledger, one row per fire key). For
    each chunk of :data:`BATCH` due schedules, one transaction reads them (``FOR UPDATE
    SKIP LOCKED``), claims their fires (``INSERT ... ON CONFLICT DO NOTHING RETURNING``:
    a fire claimed before is not sent again) and moves their next fire on; then the
    claimed fires are published in one kombu batch, as Gaffer publishes them (same
    headers, task ids and per-message options), and marked sent. No catch-up, no
    schedule kinds, no time zones, no crash recovery beyond the claim: a floor, so that
    Gaffer's dispatch can be read against what any such ledger must pay.
    """

    def __init__(self, app: Any, dsn: str, n: int) -> None:
        import psycopg

        from celery_gaffer.beat.publisher import message_defaults
        from celery_gaffer.store.schedules import Payload

        self.app = app
        self.conn = psycopg.connect(dsn)
        sender = BareSender(app)  # its producer and broker client, as Beat's would be
        self.producer, self.broker = sender.producer, sender.broker
        self.extra = message_defaults(app)(Payload(TASK, [], {}, {}))
        self.n = n
        with self.conn.transaction():
            self.conn.execute(
                "CREATE TABLE floor_schedules (id bigint PRIMARY KEY, name text NOT NULL,"
                " next_at timestamptz NOT NULL, every_s integer NOT NULL)"
            )
            self.conn.execute(
                "INSERT INTO floor_schedules SELECT i, 'floor-' || i,"
                " now() + interval '1 hour' + i * interval '1 second', 86400"
                " FROM generate_series(1, %s) AS i",
                (n,),
            )
            self.conn.execute("CREATE INDEX ON floor_schedules (next_at)")
            self.conn.execute(
                "CREATE TABLE floor_fires (key text PRIMARY KEY, task_id text NOT NULL,"
                " sent_at timestamptz)"
            )
        self.cpu_us_per_fire = 0.0

    def make_due(self, due: int, rep: int) -> None:
        """Make ``due`` schedules due, a different ``due`` each repetition while they last."""
        rep %= max(1, self.n // due)
        with self.conn.transaction():
            self.conn.execute("TRUNCATE floor_fires")
            self.conn.execute(
                "UPDATE floor_schedules SET next_at = now() - interval '1 second'"
                " WHERE id > %s AND id <= %s",
                (rep * due, (rep + 1) * due),
            )

    def rate(self, due: int) -> float:
        """Fires/s dispatching the ``due`` fires made due (all must reach the broker)."""
        from uuid import NAMESPACE_URL, uuid5

        from celery_gaffer.beat.publisher import declared_once

        conn, app, producer = self.conn, self.app, self.producer
        self.broker.delete(QUEUE)
        cpu_started = time.process_time()
        started = time.perf_counter()
        while True:
            with conn.transaction():
                rows = conn.execute(
                    "SELECT id, name, next_at FROM floor_schedules WHERE next_at <= now()"
                    " ORDER BY next_at LIMIT %s FOR UPDATE SKIP LOCKED",
                    (BATCH,),
                ).fetchall()
                if not rows:
                    break
                keys = [f"{name}@{at:%Y-%m-%dT%H:%M:%SZ}" for _, name, at in rows]
                ids = [str(uuid5(NAMESPACE_URL, "gaffer:" + key)) for key in keys]
                claimed = conn.execute(
                    "INSERT INTO floor_fires (key, task_id)"
                    " SELECT * FROM unnest(%s::text[], %s::text[])"
                    " ON CONFLICT DO NOTHING RETURNING key, task_id",
                    (keys, ids),
                ).fetchall()
                conn.execute(
                    "UPDATE floor_schedules SET next_at = next_at + make_interval(secs => every_s)"
                    " WHERE id = ANY(%s)",
                    ([row[0] for row in rows],),
                )
            with producer.batch(max_size=10_000), declared_once(producer):
                for key, task_id in claimed:
                    schedule, _, nominal = key.partition("@")
                    app.send_task(
                        TASK,
                        args=[],
                        kwargs={},
                        task_id=task_id,
                        producer=producer,
                        headers={
                            "celery_beat_task": True,
                            "gaffer_schedule": schedule,
                            "gaffer_nominal_at": nominal,
                            "gaffer_key": key,
                        },
                        **self.extra,
                    )
            with conn.transaction():
                conn.execute(
                    "UPDATE floor_fires SET sent_at = now() WHERE key = ANY(%s)",
                    ([key for key, _ in claimed],),
                )
        elapsed = time.perf_counter() - started
        self.cpu_us_per_fire = 1e6 * (time.process_time() - cpu_started) / due
        _drain(self.broker, due, "ledger floor")
        return due / elapsed


def _dispatch_reps(
    app: Any,
    tick: Any,
    make_due: Any,
    params: dict[str, Any],
    *,
    as_gaffer: bool = False,
    floor: LedgerFloor | None = None,
) -> dict[str, Any]:
    """Paired repetitions: a bare send_task loop, then the scheduler's dispatch.

    The machine is shared, so each dispatch is compared with a bare loop measured right
    before it in the same process; the medians over repetitions are reported.
    ``as_gaffer``: also the batched loop publishing as gaffer does (its CPU per message
    is what gaffer's publishing costs, the rest of Beat's CPU per fire is the ledger's).
    ``floor``: also the ledger written by hand (:class:`LedgerFloor`), after the loops.
    """
    bare = BareSender(app)
    broker = redis_client(BROKER_DB)
    runs = []
    for rep in range(params["reps"]):
        batched_rate = bare.rate(DUE, batch=True)
        batched_cpu_us = bare.cpu_us_per_send
        as_gaffer_cpu_us = None
        if as_gaffer:
            bare.rate(DUE, batch=True, as_gaffer=True)
            as_gaffer_cpu_us = bare.cpu_us_per_send
        bare_rate = bare.rate(DUE)
        if floor is not None:
            floor.make_due(DUE, rep)
            floor_rate = floor.rate(DUE)
        expected = make_due(rep)
        broker.delete(QUEUE)
        with _Phase(params, f"dispatch{rep}"):
            run = _dispatch(tick, expected, params["dispatch_cap_s"])
        broker.delete(QUEUE)
        run["bare_rate"] = bare_rate
        run["batched_rate"] = batched_rate
        run["vs_batched"] = run["rate"] / batched_rate if run["rate"] else None
        run["bare_cpu_us"] = bare.cpu_us_per_send
        run["batched_cpu_us"] = batched_cpu_us
        run["as_gaffer_cpu_us"] = as_gaffer_cpu_us
        run["vs_bare"] = run["rate"] / bare_rate if run["rate"] else None
        if floor is not None:
            run["floor_vs_batched"] = floor_rate / batched_rate
            run["floor_cpu_us"] = floor.cpu_us_per_fire
        runs.append(run)
    return {
        "due": runs[-1]["due"],
        "queued": runs[-1]["queued"],
        "complete": all(r["complete"] for r in runs),
        "rate": median([r["rate"] for r in runs]),
        "dispatch_s": median([r["dispatch_s"] for r in runs]),
        "paired_bare_rate": median([r["bare_rate"] for r in runs]),
        "vs_bare": median([r["vs_bare"] for r in runs if r["vs_bare"] is not None]),
        "paired_batched_rate": median([r["batched_rate"] for r in runs]),
        "vs_batched": median([r["vs_batched"] for r in runs if r["vs_batched"] is not None]),
        "cpu_us_per_fire": median([r["cpu_us_per_fire"] for r in runs]),
        "bare_cpu_us": median([r["bare_cpu_us"] for r in runs]),
        "batched_cpu_us": median([r["batched_cpu_us"] for r in runs]),
        "as_gaffer_cpu_us": (median([r["as_gaffer_cpu_us"] for r in runs]) if as_gaffer else None),
        "floor_vs_batched": (median([r["floor_vs_batched"] for r in runs]) if floor else None),
        "floor_cpu_us": median([r["floor_cpu_us"] for r in runs]) if floor else None,
        "reps": runs,
    }


# -- celery-gaffer ---------------------------------------------------------------------


def worker_gaffer_load(params: dict[str, Any]) -> dict[str, Any]:
    from celery_gaffer import ScheduleStore, every
    from celery_gaffer.store import database_for

    app = make_app(gaffer_database_url=pg_sqlalchemy_url(params["db"]))
    database_for(app).migrate()
    n = params["n"]
    base = _now()
    started = time.perf_counter()
    entries = [
        {
            "name": f"tenant-{i:07d}",
            "task": TASK,
            "schedule": every(DAY, anchor=base + timedelta(seconds=LEAD + i % SPREAD)),
        }
        for i in range(n)
    ]
    build_s = time.perf_counter() - started
    with _Phase(params, "add_many"):
        started = time.perf_counter()
        added = ScheduleStore(app).add_many(entries, chunk_size=params["chunk_size"])
        add_s = time.perf_counter() - started
    del entries
    _vacuum_analyze(params["db"], "gaffer_schedules")
    return {"added": added, "add_s": add_s, "build_entries_s": build_s}


def _vacuum_analyze(db: str, table: str) -> None:
    # A steady state, as autovacuum would leave it, so that timings do not depend on
    # whether autovacuum happened to run between loading and measuring.
    import psycopg

    with psycopg.connect(pg_dsn(db), autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {table}")


def worker_gaffer_beat(params: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    import psycopg

    from celery_gaffer import Scheduler

    app = make_app(gaffer_database_url=pg_sqlalchemy_url(params["db"]))
    import_s = time.perf_counter() - started

    with _Phase(params, "startup"):
        started = time.perf_counter()
        scheduler = Scheduler(app)
        setup_s = time.perf_counter() - started
        first_tick_sleep = scheduler.tick()
        startup_s = time.perf_counter() - started
    rss_start = peak_rss_mb()

    with _Phase(params, "idle"):
        cpu_started = time.process_time()
        idle = _idle_ticks(scheduler.tick, params["idle_ticks"], params["idle_seconds"])
        idle_cpu_ms = 1000 * (time.process_time() - cpu_started) / max(len(idle), 1)
    rss_idle = peak_rss_mb()

    n, due = params["n"], min(DUE, params["n"])

    def make_due(rep: int) -> int:
        # Watermark one day back, next_fire_at one second back: exactly one due fire each.
        stride, offset, fresh = _subset(n, due, rep)
        with psycopg.connect(pg_dsn(params["db"]), autocommit=True) as conn:
            if not fresh:
                # The same schedules again: forget their fires, or the ledger (rightly)
                # refuses to send them twice.
                conn.execute("TRUNCATE gaffer_fires")
            made: int = conn.execute(
                "UPDATE gaffer_schedules SET watermark_at = now() - interval '1 day',"
                " next_fire_at = now() - interval '1 second'"
                " WHERE id IN (SELECT id FROM gaffer_schedules WHERE id %% %s = %s"
                " ORDER BY id LIMIT %s)",
                (stride, offset, due),
            ).rowcount
        return made

    scheduler.producer  # noqa: B018 - connect to the broker before the clock starts
    floor = LedgerFloor(app, pg_dsn(params["db"]), n) if due == DUE else None
    dispatch = _dispatch_reps(app, scheduler.tick, make_due, params, as_gaffer=True, floor=floor)
    with psycopg.connect(pg_dsn(params["db"]), autocommit=True) as conn:
        sent = conn.execute("SELECT count(*) FROM gaffer_fires WHERE state = 'sent'").fetchone()
    return {
        "import_s": import_s,
        "setup_s": setup_s,
        "startup_s": startup_s,
        "first_tick_sleep_s": first_tick_sleep,
        "idle_ms": 1000 * median(idle) if idle else None,
        "idle_p90_ms": 1000 * sorted(idle)[int(0.9 * (len(idle) - 1))] if idle else None,
        "idle_ticks": len(idle),
        "idle_cpu_ms": idle_cpu_ms,
        "rss_start_mb": rss_start,
        "rss_idle_mb": rss_idle,
        "rss_peak_mb": peak_rss_mb(),
        "ledger_sent": sent[0] if sent else None,
        **dispatch,
    }


# -- celery-redbeat --------------------------------------------------------------------


def _redbeat_app() -> Any:
    return make_app(redbeat_redis_url=redis_url(REDBEAT_DB), redbeat_lock_key=None)


def worker_redbeat_load(params: dict[str, Any]) -> dict[str, Any]:
    from celery.schedules import schedule
    from redbeat import RedBeatSchedulerEntry

    app = _redbeat_app()
    base = _now()
    interval = schedule(timedelta(seconds=DAY), app=app)
    started = time.perf_counter()
    for i in range(params["n"]):
        RedBeatSchedulerEntry(
            f"tenant-{i:07d}",
            TASK,
            interval,
            args=[],
            kwargs={},
            options={},
            last_run_at=base - timedelta(seconds=DAY - LEAD - i % SPREAD),
            app=app,
        ).save()
    add_s = time.perf_counter() - started
    # RedBeatSchedulerEntry.save() scores an entry at last_run_at + (time from *now* to its
    # next run), which is its due time only when last_run_at is about now (as after a
    # run, redbeat's steady state). Our entries last ran at spread times in the past, so
    # put each one's score at its true due time, as redbeat itself would after a run;
    # otherwise every tick would load every entry as "due".
    started = time.perf_counter()
    store = redis_client(REDBEAT_DB)
    schedule_key = app.redbeat_conf.schedule_key
    for start in range(0, params["n"], 1000):
        with store.pipeline() as pipe:
            for i in range(start, min(start + 1000, params["n"])):
                key = RedBeatSchedulerEntry.generate_key(app, f"tenant-{i:07d}")
                pipe.zadd(
                    schedule_key, {key: (base + timedelta(seconds=LEAD + i % SPREAD)).timestamp()}
                )
            pipe.execute()
    return {"added": params["n"], "add_s": add_s, "rescore_s": time.perf_counter() - started}


def worker_redbeat_beat(params: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    from redbeat import RedBeatScheduler, RedBeatSchedulerEntry
    from redbeat.decoder import RedBeatJSONEncoder

    app = _redbeat_app()
    import_s = time.perf_counter() - started

    started = time.perf_counter()
    scheduler = RedBeatScheduler(app)
    setup_s = time.perf_counter() - started
    scheduler.tick()
    startup_s = time.perf_counter() - started
    rss_start = peak_rss_mb()
    cpu_started = time.process_time()
    idle = _idle_ticks(scheduler.tick, params["idle_ticks"], params["idle_seconds"])
    idle_cpu_ms = 1000 * (time.process_time() - cpu_started) / max(len(idle), 1)
    rss_idle = peak_rss_mb()

    n, due = params["n"], min(DUE, params["n"])
    store = redis_client(REDBEAT_DB)
    schedule_key = app.redbeat_conf.schedule_key

    def make_due(rep: int) -> int:
        # last_run_at a day back and the score one second back: due now, once.
        stride, offset, _ = _subset(n, due, rep)
        meta = json.dumps(
            {"last_run_at": _now() - timedelta(days=1, seconds=1), "total_run_count": 0},
            cls=RedBeatJSONEncoder,
        )
        score = time.time() - 1
        names = [f"tenant-{i:07d}" for i in range(offset, n, stride)][:due]
        for start in range(0, len(names), 1000):
            with store.pipeline() as pipe:
                for name in names[start : start + 1000]:
                    key = RedBeatSchedulerEntry.generate_key(app, name)
                    pipe.hset(key, "meta", meta)
                    pipe.zadd(schedule_key, {key: score})
                pipe.execute()
        return len(names)

    scheduler.producer  # noqa: B018 - connect to the broker before the clock starts
    dispatch = _dispatch_reps(app, scheduler.tick, make_due, params)
    return {
        "import_s": import_s,
        "setup_s": setup_s,
        "startup_s": startup_s,
        "idle_ms": 1000 * median(idle) if idle else None,
        "idle_ticks": len(idle),
        "idle_cpu_ms": idle_cpu_ms,
        "rss_start_mb": rss_start,
        "rss_idle_mb": rss_idle,
        "rss_peak_mb": peak_rss_mb(),
        **dispatch,
    }


# -- django-celery-beat ----------------------------------------------------------------


def _setup_django(db: str) -> None:
    import django
    from django.conf import settings

    settings.configure(
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": db,
                "USER": PG_USER,
                "HOST": PG_HOST,
                "PORT": str(PG_PORT),
            }
        },
        INSTALLED_APPS=["django_celery_beat"],
        USE_TZ=True,
        TIME_ZONE="UTC",
        DEFAULT_AUTO_FIELD="django.db.models.AutoField",
        DJANGO_CELERY_BEAT_TZ_AWARE=True,
        LOGGING_CONFIG=None,
    )
    django.setup()


def worker_djcb_load(params: dict[str, Any]) -> dict[str, Any]:
    _setup_django(params["db"])
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django_celery_beat.models import IntervalSchedule, PeriodicTask, PeriodicTasks

    base = _now()
    started = time.perf_counter()
    interval = IntervalSchedule.objects.create(every=DAY, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.bulk_create(
        (
            PeriodicTask(
                name=f"tenant-{i:07d}",
                task=TASK,
                interval=interval,
                args="[]",
                kwargs="{}",
                last_run_at=base - timedelta(seconds=DAY - LEAD - i % SPREAD),
            )
            for i in range(params["n"])
        ),
        batch_size=5000,
    )
    PeriodicTasks.update_changed()
    add_s = time.perf_counter() - started
    _vacuum_analyze(params["db"], "django_celery_beat_periodictask")
    return {"added": params["n"], "add_s": add_s}


def worker_djcb_beat(params: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    _setup_django(params["db"])
    from django.db import connection
    from django_celery_beat.models import PeriodicTasks
    from django_celery_beat.schedulers import DatabaseScheduler

    app = make_app()
    import_s = time.perf_counter() - started

    started = time.perf_counter()
    scheduler = DatabaseScheduler(app)
    setup_s = time.perf_counter() - started
    scheduler.tick()
    startup_s = time.perf_counter() - started
    rss_start = peak_rss_mb()
    cpu_started = time.process_time()
    idle = _idle_ticks(scheduler.tick, params["idle_ticks"], params["idle_seconds"])
    idle_cpu_ms = 1000 * (time.process_time() - cpu_started) / max(len(idle), 1)
    rss_idle = peak_rss_mb()

    n, due = params["n"], min(DUE, params["n"])

    def make_due(rep: int) -> int:
        stride, offset, _ = _subset(n, due, rep)
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE django_celery_beat_periodictask"
                " SET last_run_at = now() - interval '2 days'"
                " WHERE id IN (SELECT id FROM django_celery_beat_periodictask"
                " WHERE id %% %s = %s ORDER BY id LIMIT %s)",
                [stride, offset, due],
            )
            made: int = cursor.rowcount
        PeriodicTasks.update_changed()  # how django-celery-beat notices an edit
        return made

    scheduler.producer  # noqa: B018 - connect to the broker before the clock starts
    dispatch = _dispatch_reps(app, scheduler.tick, make_due, params)
    return {
        "import_s": import_s,
        "setup_s": setup_s,
        "startup_s": startup_s,
        "idle_ms": 1000 * median(idle) if idle else None,
        "idle_ticks": len(idle),
        "idle_cpu_ms": idle_cpu_ms,
        "rss_start_mb": rss_start,
        "rss_idle_mb": rss_idle,
        "rss_peak_mb": peak_rss_mb(),
        **dispatch,
    }


# -- bare send_task --------------------------------------------------------------------


def worker_bare(params: dict[str, Any]) -> dict[str, Any]:
    """``app.send_task`` in a loop: with one Beat-style producer, and through the pool."""
    sender = BareSender(make_app())
    producer_rate = sender.rate(params["n"])
    pool_rate = sender.rate(params["n"], pool=True)
    batched_rate = sender.rate(params["n"], batch=True)
    return {
        "producer_rate": producer_rate,
        "pool_rate": pool_rate,
        "batched_rate": batched_rate,
        "rate": max(producer_rate, pool_rate),
    }


WORKERS = {
    "gaffer-load": worker_gaffer_load,
    "gaffer-beat": worker_gaffer_beat,
    "redbeat-load": worker_redbeat_load,
    "redbeat-beat": worker_redbeat_beat,
    "djcb-load": worker_djcb_load,
    "djcb-beat": worker_djcb_beat,
    "bare": worker_bare,
}


# ==== orchestrating side ============================================================


class Run:
    """Runs the measurements, remembering every database it made so it can drop them."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.databases: list[str] = []
        self.rows: dict[tuple[str, int], dict[str, Any]] = {}
        self.bare: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.revision = _revision()
        self.load_start = "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())

    # -- helpers

    def log(self, message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    def worker(self, role: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        return run_worker(SCRIPT, role, params, timeout=timeout)

    def new_database(self, label: str) -> str:
        name = new_database_name(label)
        self.databases.append(name)
        create_database(name)
        return name

    def drop(self, name: str) -> None:
        try:
            drop_database(name)
        finally:
            if name in self.databases:
                self.databases.remove(name)

    def cleanup(self) -> None:
        for name in list(self.databases):
            try:
                self.drop(name)
            except Exception as exc:  # noqa: BLE001 - keep cleaning up
                print(f"could not drop {name}: {exc}", file=sys.stderr)
        try:
            flush_redis()
        except Exception as exc:  # noqa: BLE001 - keep cleaning up
            print(f"could not flush Redis DBs 12-14: {exc}", file=sys.stderr)

    def beat_params(self, n: int, label: str, **extra: Any) -> dict[str, Any]:
        quick = self.args.quick
        return {
            "n": n,
            "label": label,
            "idle_ticks": 200,
            "idle_seconds": 3.0 if quick else 10.0,
            "dispatch_cap_s": 20.0 if quick else self.args.dispatch_cap,
            "reps": 1 if quick else self.args.reps,
            "profile_dir": self.args.profile,
            **extra,
        }

    def guarded(self, what: str, fn: Any) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - record it and go on
            self.errors.append(f"{what}: {exc}")
            self.log(f"FAILED {what}: {str(exc).splitlines()[0]}")
            if not isinstance(exc, WorkerFailed):
                traceback.print_exc()

    # -- measurements

    def run_bare(self) -> None:
        self.log("bare send_task loop ...")
        flush_redis([BROKER_DB])
        result = self.worker("bare", {"n": DUE}, timeout=300)
        self.bare.append(result)
        self.log(
            f"  bare: {result['producer_rate']:.0f}/s with a Beat producer, "
            f"{result['pool_rate']:.0f}/s through the pool, "
            f"{result['batched_rate']:.0f}/s in publish batches of {BATCH}"
        )

    def run_gaffer(self, n: int) -> None:
        db = self.new_database(f"gaffer_{n}")
        try:
            self.log(f"gaffer N={n:,}: add_many ...")
            load = self.worker(
                "gaffer-load",
                {
                    "db": db,
                    "n": n,
                    "chunk_size": 5000,
                    "label": f"gaffer_{n}",
                    "profile_dir": self.args.profile,
                },
                timeout=3600,
            )
            self.log(f"  add_many {load['add_s']:.1f} s; Beat ...")
            flush_redis([BROKER_DB])
            beat = self.worker(
                "gaffer-beat", self.beat_params(n, f"gaffer_{n}", db=db), timeout=1200
            )
            self.rows[("celery-gaffer", n)] = {**load, **beat}
            self.log(f"  {_summary(beat)}")
        finally:
            self.drop(db)
            flush_redis([BROKER_DB])

    def run_redbeat(self, n: int) -> None:
        flush_redis([BROKER_DB, REDBEAT_DB])
        try:
            self.log(f"redbeat N={n:,}: save() entries ...")
            load = self.worker("redbeat-load", {"n": n}, timeout=1800)
            self.log(f"  saved in {load['add_s']:.1f} s; Beat ...")
            beat = self.worker("redbeat-beat", self.beat_params(n, f"redbeat_{n}"), timeout=900)
            self.rows[("celery-redbeat", n)] = {**load, **beat}
            self.log(f"  {_summary(beat)}")
        finally:
            flush_redis([BROKER_DB, REDBEAT_DB])

    def run_djcb(self, n: int) -> None:
        db = self.new_database(f"djcb_{n}")
        try:
            self.log(f"django-celery-beat N={n:,}: migrate, bulk_create ...")
            load = self.worker("djcb-load", {"db": db, "n": n}, timeout=1800)
            self.log(f"  created in {load['add_s']:.1f} s; Beat ...")
            flush_redis([BROKER_DB])
            params = self.beat_params(n, f"djcb_{n}", db=db)
            params["idle_ticks"] = 50
            params["reps"] = 1  # a capped minute each: once is enough
            beat = self.worker("djcb-beat", params, timeout=1200)
            self.rows[("django-celery-beat", n)] = {**load, **beat}
            self.log(f"  {_summary(beat)}")
        finally:
            self.drop(db)
            flush_redis([BROKER_DB])

    def execute(self) -> None:
        sizes = self.args.sizes
        others = [n for n in sizes if n <= self.args.competitor_max]
        which = self.args.only
        if "bare" in which:
            self.guarded("bare send_task", self.run_bare)
        for n in sizes:
            if "gaffer" in which:
                self.guarded(f"celery-gaffer N={n}", lambda n=n: self.run_gaffer(n))
        for n in others:
            if "redbeat" in which:
                self.guarded(f"celery-redbeat N={n}", lambda n=n: self.run_redbeat(n))
            if "djcb" in which:
                self.guarded(f"django-celery-beat N={n}", lambda n=n: self.run_djcb(n))
        if "bare" in which and not self.args.quick:
            self.guarded("bare send_task (again)", self.run_bare)


def _revision() -> str:
    """The commit of the code under test, and whether celery_gaffer/ differs from it."""
    import subprocess

    root = os.path.dirname(os.path.dirname(SCRIPT))
    try:
        head = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--", "celery_gaffer"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return f"commit {head}" + (" with uncommitted changes in celery_gaffer/" if dirty else "")


def _summary(r: dict[str, Any]) -> str:
    reps = ", ".join(f"{x['rate']:.0f}/s vs bare {x['bare_rate']:.0f}/s" for x in r.get("reps", []))
    return (
        f"start-up {r['startup_s']:.3f} s, idle tick {_fmt(r.get('idle_ms'), 2)} ms, "
        f"RSS {r['rss_idle_mb']:.0f}/{r['rss_peak_mb']:.0f} MB, "
        f"dispatch {r['queued']}/{r['due']} in {r['dispatch_s']:.2f} s; {reps}"
    )


def _cpu_ratio(r: dict[str, Any]) -> str:
    """Bare send_task CPU per message over the scheduler's CPU per fire, in the Beat process."""
    if not r.get("cpu_us_per_fire") or not r.get("bare_cpu_us"):
        return "-"
    return (
        f"{r['cpu_us_per_fire']:.0f} us vs {r['bare_cpu_us']:.0f} us bare,"
        f" ratio {r['bare_cpu_us'] / r['cpu_us_per_fire']:.2f}"
    )


def _fmt(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def report(run: Run) -> bool:
    """Print the table, the ratios and the targets; True when every target is met."""
    best_bare = max((b["rate"] for b in run.bare), default=None)
    rows: list[list[Any]] = []
    for (name, n), r in sorted(run.rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        rate = r.get("rate")
        partial = "" if r.get("complete") else f" ({r.get('queued')}/{r.get('due')} in cap)"
        rows.append(
            [
                name,
                f"{n:,}",
                _fmt(r.get("add_s"), 1),
                _fmt(r.get("import_s"), 2),
                _fmt(r.get("startup_s"), 3),
                _fmt(r.get("idle_ms"), 2),
                _fmt(r.get("rss_idle_mb"), 0),
                _fmt(r.get("rss_peak_mb"), 0),
                (_fmt(rate, 0) + partial) if rate is not None else "-",
                _fmt(r.get("paired_bare_rate"), 0),
                _fmt(r.get("vs_bare"), 2),
                _fmt(r.get("paired_batched_rate"), 0),
                _fmt(r.get("vs_batched"), 2),
            ]
        )
    for i, b in enumerate(run.bare, 1):
        for kind, label in (
            ("producer", "Beat producer"),
            ("pool", "producer pool"),
            ("batched", f"batches of {BATCH}"),
        ):
            rows.append([f"bare send_task ({label})", f"run {i}"] + [""] * 6)
            rows[-1] += [f"{b[kind + '_rate']:.0f}", "", "", "", ""]
    print()
    print(
        f"Beat benchmark: {DUE:,} fires due at once; PostgreSQL {PG_HOST}:{PG_PORT}, "
        f"Redis broker DB {BROKER_DB}; python {sys.version.split()[0]}; "
        f"{os.cpu_count()} CPUs, load average {run.load_start} at start, "
        f"{'{:.2f} {:.2f} {:.2f}'.format(*os.getloadavg())} at end"
    )
    headers = [
        "scheduler", "N", "add s", "import s", "start-up s", "idle tick ms", "RSS MB",
        "RSS peak MB", "dispatch fires/s", "paired bare/s", "/ bare", "paired batched/s",
        "/ batched",
    ]  # fmt: skip
    print(format_table(headers, rows))
    print(
        "start-up = Scheduler(app) (setup_schedule) + first tick; RSS = peak after start-up"
        " and idle ticks, RSS peak = after dispatching too; add s = add_many / save() /"
        " bulk_create; dispatch = median of repetitions, each paired with a bare send_task"
        " loop run just before it in the same process (paired bare/s); / bare = median of"
        " the paired ratios. The target is against the bare loop (one send_task, one broker"
        f" round trip each); 'batched' is the same loop inside kombu's Producer.batch() in"
        f" chunks of {BATCH} (one round trip per chunk), which is how gaffer publishes: its"
        " ratio shows what the ledger costs on top of the same publishing."
    )
    if best_bare:
        print(
            f"bare send_task loop in its own process, best of {len(run.bare)}: "
            f"{best_bare:.0f} fires/s"
        )
    print(
        "Beat-process CPU per fire during dispatch, us (paired bare send_task loop): "
        + "; ".join(
            f"{name} {n:,}: {r['cpu_us_per_fire']:.0f} ({r['bare_cpu_us']:.0f})"
            for (name, n), r in sorted(run.rows.items(), key=lambda kv: (kv[0][1], kv[0][0]))
            if r.get("cpu_us_per_fire") and r.get("bare_cpu_us")
        )
    )
    print(f"celery-gaffer code measured: {run.revision}")

    checks: list[tuple[str, bool | None, str]] = []
    for (name, n), r in sorted(run.rows.items(), key=lambda kv: kv[0][1]):
        if name != "celery-gaffer":
            continue
        rate, vs_bare = r.get("rate"), r.get("vs_bare")
        unpaired = f", {rate / best_bare:.2f} against the best bare run" if best_bare else ""
        checks.append(
            (
                f"N={n:,}: gaffer dispatch / bare send_task >= {TARGET_GAFFER_VS_BARE}",
                None if vs_bare is None else vs_bare >= TARGET_GAFFER_VS_BARE,
                f"{_fmt(vs_bare, 2)} (paired{unpaired}; Beat CPU per fire {_cpu_ratio(r)})",
            )
        )
        vs_batched = r.get("vs_batched")
        share = ""
        if r.get("cpu_us_per_fire") and r.get("batched_cpu_us"):
            share = (
                f"; Beat CPU per fire {r['cpu_us_per_fire']:.0f} us vs {r['batched_cpu_us']:.0f}"
                " us batched bare"
            )
            publishing = r.get("as_gaffer_cpu_us")
            if publishing:
                # Gaffer publishes for less than the bare loop (each queue to kombu's
                # declaration cache once a batch): its own publishing is the reference.
                ledger = r["cpu_us_per_fire"] - publishing
                share += (
                    f"; gaffer's publishing alone {publishing:.0f} us, the ledger the rest:"
                    f" {ledger:.0f} us, {ledger / r['cpu_us_per_fire']:.0%}"
                )
        if r.get("floor_vs_batched"):
            share += (
                f"; the ledger written by hand (the floor) {r['floor_vs_batched']:.2f}x,"
                f" {r['floor_cpu_us']:.0f} us CPU per fire"
            )
        checks.append(
            (
                f"N={n:,}: gaffer dispatch / batched bare send_task >= {TARGET_GAFFER_VS_BATCHED}",
                None if vs_batched is None else vs_batched >= TARGET_GAFFER_VS_BATCHED,
                f"{_fmt(vs_batched, 2)} (paired{share})",
            )
        )
        redbeat = run.rows.get(("celery-redbeat", n))
        if redbeat and redbeat.get("rate") and rate:
            raw = rate / redbeat["rate"]
            normalised = (
                vs_bare / redbeat["vs_bare"] if vs_bare and redbeat.get("vs_bare") else None
            )
            checks.append(
                (
                    f"N={n:,}: gaffer dispatch / redbeat >= {TARGET_GAFFER_VS_REDBEAT}",
                    None if normalised is None else normalised >= TARGET_GAFFER_VS_REDBEAT,
                    f"{_fmt(normalised, 2)} (each over its paired bare loop; raw rates {raw:.2f};"
                    f" Beat CPU per fire {redbeat['cpu_us_per_fire'] / r['cpu_us_per_fire']:.2f})",
                )
            )
        djcb = run.rows.get(("django-celery-beat", n))
        if djcb and djcb.get("rate") and rate:
            print(
                f"N={n:,}: gaffer vs django-celery-beat: dispatch {rate / djcb['rate']:.0f}x,"
                f" start-up {djcb['startup_s'] / r['startup_s']:.1f}x faster,"
                f" idle tick {djcb['idle_ms'] / r['idle_ms']:.0f}x faster"
            )
        if n == TARGET_AT_N:
            checks += [
                (
                    f"N={n:,}: start-up < {TARGET_STARTUP_S} s",
                    r["startup_s"] < TARGET_STARTUP_S,
                    f"{r['startup_s']:.3f} s",
                ),
                (
                    f"N={n:,}: idle tick < {TARGET_IDLE_MS} ms",
                    r["idle_ms"] < TARGET_IDLE_MS,
                    f"{r['idle_ms']:.2f} ms median (p90 {_fmt(r.get('idle_p90_ms'), 2)} ms,"
                    f" Beat CPU {_fmt(r.get('idle_cpu_ms'), 2)} ms per tick)",
                ),
                (
                    f"N={n:,}: RSS < {TARGET_RSS_MB:.0f} MB",
                    r["rss_idle_mb"] < TARGET_RSS_MB,
                    f"{r['rss_idle_mb']:.0f} MB (peak after dispatch {r['rss_peak_mb']:.0f} MB)",
                ),
            ]
    print()
    print("Targets:")
    ok = True
    for text, passed, value in checks:
        word = "n/a " if passed is None else ("MET " if passed else "MISS")
        ok = ok and bool(passed)
        print(f"  [{word}] {text}: {value}")
    if TARGET_AT_N not in run.args.sizes:
        print(f"  (start-up / idle / RSS targets are checked at N={TARGET_AT_N:,}, not run)")
    for error in run.errors:
        ok = False
        print(f"ERROR {error}")
    if run.args.profile:
        print_profiles(run.args.profile)
    return ok


def print_profiles(directory: str) -> None:
    import glob
    import io
    import pstats

    for path in sorted(glob.glob(os.path.join(directory, "gaffer_*.pstats"))):
        for title, order, restriction, count in (
            ("celery_gaffer functions by cumulative time", "cumulative", "celery_gaffer/", 12),
            ("everything by own time", "tottime", "", 8),
        ):
            out = io.StringIO()
            stats = pstats.Stats(path, stream=out)
            stats.sort_stats(order).print_stats(*(a for a in (restriction, count) if a))
            text = out.getvalue()
            print(f"\n== {os.path.basename(path)}: {title} (cProfile, inflated) ==")
            print(text[text.find("   ncalls") :].rstrip().replace(sys.prefix + "/", ""))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default="10000,100000,1000000", help="comma-separated numbers of schedules"
    )
    parser.add_argument("--quick", action="store_true", help="N=10,000 only, short caps")
    parser.add_argument(
        "--only",
        default="gaffer,redbeat,djcb,bare",
        help="which of gaffer,redbeat,djcb,bare to run",
    )
    parser.add_argument(
        "--competitor-max",
        type=int,
        default=COMPETITOR_MAX_N,
        help="largest N at which redbeat and django-celery-beat run",
    )
    parser.add_argument(
        "--dispatch-cap",
        type=float,
        default=60.0,
        help="longest seconds a dispatch measurement may take",
    )
    parser.add_argument(
        "--reps", type=int, default=5, help="dispatch repetitions (gaffer, redbeat)"
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="cProfile celery-gaffer's add_many / start-up / idle / dispatch",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--params", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    if args.quick:
        args.sizes = [10_000]
    args.only = {s.strip() for s in args.only.split(",")}
    if args.profile:
        args.profile = os.path.abspath(args.profile)
        os.makedirs(args.profile, exist_ok=True)
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.worker:
        emit_result(WORKERS[args.worker](json.loads(args.params)))
        return 0
    run = Run(args)
    started = time.monotonic()
    flush_redis()
    try:
        run.execute()
    except KeyboardInterrupt:
        run.errors.append("interrupted")
    finally:
        run.cleanup()
    ok = report(run)
    print(f"\ntotal {time.monotonic() - started:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
