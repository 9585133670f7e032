#!/usr/bin/env python
"""GafferTask overhead: per-task throughput and ``run_batches`` against hand-written code.

    python benchmarks/task_overhead.py [--tasks 2000] [--rows 1000000] [--quick]
        [--blocks 10] [--segments 10] [--only tasks,batches] [--profile DIR]

Part 1, tasks/s in one real ``celery worker`` process (``--pool=solo``, one process, so
the number is the per-task cost; the same process runs every variant):

* ``plain``: a plain Celery task (``bind=True``) with its own SQLAlchemy engine (default
  pool, no pre-ping) inserting one row through a ``Session`` in one transaction;
* ``gaffer``: a ``GafferTask`` with ``gaffer_key="row:{n}"`` inserting the same row
  through ``self.session()`` (key lookup, key claim at commit, run record rows);
* ``gaffer+lease``: the same inside an explicit ``self.lease("bench.lease")`` (acquire,
  renewer thread, fence check at commit, release);
* ``gaffer+overlap``: the ``gaffer`` task with ``gaffer_overlap="forbid"``;
* ``keyed``: the floor under ``gaffer``, written by hand: a plain task that does only
  what an idempotent run must, with no run records and no round trip to spare. In the
  plain task's transaction it reads its key's state first (one round trip more than
  ``plain``) and returns if the key is completed; else it inserts the row, then claims
  the key and commits in one round trip (psycopg's pipeline; a key claimed meanwhile
  fails the claim and the row is rolled back). ``gaffer`` does the same work (it reads
  the key with its start record, before the body, which may do work outside the
  database before it opens a session) and records the run. ``keyed`` vs ``plain`` is
  what the key itself costs; ``gaffer`` vs ``keyed`` what Gaffer costs on top.
* ``recorded``: ``keyed`` plus a run record by hand, the floor under a keyed run that
  is recorded: a start record (``INSERT`` into an unpartitioned table with two indexes,
  returning the key's state, which replaces ``keyed``'s read) before the body and an
  end record (``UPDATE``) after it, each one round trip on a connection of its own with
  relaxed commits (``synchronous_commit=off``), as Gaffer writes its records.

Every message is enqueued to Redis up front (a few warm-up tasks of each variant, then
N tasks per variant split into ``--blocks`` blocks, interleaved with the variants' order
rotating, so that a noisy neighbour slows every variant alike), then the worker is
started. The worker's own ``task_prerun`` receiver (connected before
``celery_gaffer.install``) and ``task_postrun`` receiver (connected after it, so the
run-record writes are inside the window) time each block from its first task start to
its last task finish; a final ``bench.report`` task writes the timings to the database.
tasks/s = a variant's tasks / the sum of its block windows; "paired median" is the
median over the cycles of (variant block rate / plain block rate in the same cycle);
the targets are judged on the paired medians (robust to load from elsewhere on the
machine), the overall ratios are printed beside them.

Part 2, in-process (``task.apply()``): ``self.run_batches`` over ``--rows`` rows (keyset
fetch of ORM rows, ``handle`` increments a counter column, batch_size 1000) against a
hand-written loop doing the same with the same session pattern (fetch a batch, update
the rows, upsert a cursor row, commit). Each variant has its own identical table;
the rows are split into ``--segments`` ranges, each processed by one call of each
variant, alternating; rows/s = all rows / total time, plus the median per-segment ratio.

Targets: ``gaffer`` >= 0.72x ``plain`` and ``run_batches`` >= 0.9x the hand-written
loop (issue 37), ``gaffer+lease`` and ``gaffer+overlap`` >= 0.6x ``plain``.

``--otel absent|unconfigured|sdk``: the worker's OpenTelemetry (part 1): the package
hidden (as without the ``[otel]`` extra), the API installed with no SDK configured (the
default), or the SDK configured with an exporter that discards the spans (a span per
traced run, started and ended by Gaffer).

``--profile DIR``: py-spy (``--idle``, so waits on the database count) records the
worker during part 1 and the hottest celery_gaffer frames are printed; part 2's
run_batches calls run under cProfile. Profiling slows things: compare ratios of
unprofiled runs. ``--quick``: 300 tasks in 6 blocks, 100,000 rows in 4 segments (~1 min;
the default run takes ~4-7 min on 2 busy cores).

Only 127.0.0.1: a throwaway PostgreSQL database ``gaffer_bench_<random>_task`` (dropped
at the end, even on failure) and Redis DB 11 (flushed at start and end). The worker
subprocess is killed on exit. Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import (  # noqa: E402
    TASK_REDIS_DB,
    create_database,
    drop_database,
    flush_redis,
    format_table,
    new_database_name,
    pg_dsn,
    pg_sqlalchemy_url,
)

MODULE = "task_overhead"
DB_ENV = "GAFFER_BENCH_TASK_DB"
OTEL_ENV = "GAFFER_BENCH_OTEL"
# The only Redis DB this benchmark uses (emptied at start and end, when it is its own).
REDIS_DB = TASK_REDIS_DB
BROKER_URL = f"redis://127.0.0.1:6379/{REDIS_DB}"
QUEUE = "bench.task_overhead"
LEASE_NAME = "bench.lease"
BATCH_SIZE = 1000

#: GafferTask >= this x the plain task's rate: with a key and a fenced session (issue 37:
#: 0.72x), and inside an explicit lease or an overlap lease (0.6x).
TARGET_TASKS = {"gaffer": 0.72, "gaffer+lease": 0.6, "gaffer+overlap": 0.6}
TARGET_BATCHES = 0.9  # run_batches >= 0.9 x hand-written loop

VARIANTS = ("plain", "keyed", "recorded", "gaffer", "gaffer+lease", "gaffer+overlap")
#: Variants that are plain Celery tasks (no Gaffer run records).
PLAIN = ("plain", "keyed", "recorded")
TASK_OF = {
    "plain": "bench.plain_insert",
    "keyed": "bench.keyed_insert",
    "recorded": "bench.recorded_insert",
    "gaffer": "bench.gaffer_insert",
    "gaffer+lease": "bench.gaffer_lease_insert",
    "gaffer+overlap": "bench.gaffer_overlap_insert",
}

#: The ``keyed`` task's claim (a bound parameter; a repeated key fails it).
CLAIM_SQL = "INSERT INTO bench_keys (key, state, completed_at) VALUES (%s, 'completed', now())"

#: The ``recorded`` task's run records (its key's state comes back with the start).
START_SQL = (
    "INSERT INTO bench_runs (task_id, attempt, state, started_at)"
    " VALUES (%s, (SELECT count(*) + 1 FROM bench_runs WHERE task_id = %s), 'running', now())"
    " RETURNING id, (SELECT state FROM bench_keys WHERE key = %s)"
)
END_SQL = "UPDATE bench_runs SET state = %s, finished_at = now() WHERE id = %s"

ROWS_DDL = """
CREATE TABLE IF NOT EXISTS bench_rows (
    id bigserial PRIMARY KEY,
    variant text NOT NULL,
    n bigint NOT NULL,
    tag text NOT NULL,
    task_id text,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS bench_timing (id serial PRIMARY KEY, data jsonb NOT NULL);
CREATE TABLE IF NOT EXISTS bench_runs (
    id bigserial PRIMARY KEY, task_id text NOT NULL, attempt integer NOT NULL,
    state text NOT NULL, started_at timestamptz NOT NULL, finished_at timestamptz
);
CREATE INDEX IF NOT EXISTS bench_runs_task_id ON bench_runs (task_id);
CREATE TABLE IF NOT EXISTS bench_keys (
    key text PRIMARY KEY, state text NOT NULL, completed_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS bench_cursors (
    name text PRIMARY KEY, value jsonb, processed bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL
);
"""


# =====================================================================================
# The Celery app (imported by the worker subprocess as ``task_overhead:app``)
# =====================================================================================


def make_app(dbname: str) -> Any:
    """The benchmark's Celery app on database ``dbname``, Gaffer installed."""
    from celery import Celery, signals
    from sqlalchemy import (
        BigInteger,
        Column,
        DateTime,
        Integer,
        MetaData,
        Table,
        Text,
        create_engine,
        insert,
        select,
    )
    from sqlalchemy.orm import sessionmaker

    import celery_gaffer

    url = pg_sqlalchemy_url(dbname)
    app = Celery(MODULE, broker=BROKER_URL)
    app.conf.update(
        gaffer_database_url=url,
        task_default_queue=QUEUE,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    meta = MetaData()
    rows = Table(
        "bench_rows",
        meta,
        Column("id", BigInteger, primary_key=True),
        Column("variant", Text),
        Column("n", BigInteger),
        Column("tag", Text),
        Column("task_id", Text),
    )
    Table("bench_timing", meta, Column("id", Integer, primary_key=True), Column("data", Text))
    keys = Table(
        "bench_keys",
        meta,
        Column("key", Text, primary_key=True),
        Column("state", Text),
        Column("completed_at", DateTime(timezone=True)),
    )

    # -- timing receivers: prerun connected BEFORE install(), postrun AFTER it, so the
    #    run-record writes of celery_gaffer fall inside each task's window.
    timing: dict[str, dict[str, Any]] = {}

    def _tag(kwargs: Any) -> str | None:
        return kwargs.get("tag") if isinstance(kwargs, dict) else None

    def on_prerun(task_id: str | None = None, task: Any = None, kwargs: Any = None, **_: Any):
        tag = _tag(kwargs)
        if tag is None:
            return
        now = time.time()
        entry = timing.setdefault(tag, {"first": now, "last": now, "count": 0, "busy": 0.0})
        entry["_start"] = now

    def on_postrun(task_id: str | None = None, task: Any = None, kwargs: Any = None, **_: Any):
        tag = _tag(kwargs)
        if tag is None or tag not in timing:
            return
        now = time.time()
        entry = timing[tag]
        entry["last"] = now
        entry["count"] += 1
        entry["busy"] += now - entry.pop("_start", now)

    signals.task_prerun.connect(on_prerun, weak=False, dispatch_uid="bench.prerun")
    celery_gaffer.install(app)
    signals.task_postrun.connect(on_postrun, weak=False, dispatch_uid="bench.postrun")

    # -- the plain task's own engine (lazily, per process)
    state: dict[str, Any] = {}

    def plain_sessions() -> Any:
        factory = state.get("factory")
        if factory is None or state.get("pid") != os.getpid():
            engine = create_engine(url)
            factory = sessionmaker(bind=engine, expire_on_commit=False)
            state.update(factory=factory, pid=os.getpid(), engine=engine)
        return factory

    @app.task(bind=True, name=TASK_OF["plain"])
    def plain_insert(self: Any, n: int, tag: str) -> None:
        with plain_sessions().begin() as s:
            s.execute(insert(rows).values(variant="plain", n=n, tag=tag, task_id=self.request.id))

    def claim_and_commit(s: Any, key: str) -> bool:
        """Claim ``key`` and commit ``s``'s transaction in one round trip (psycopg's
        pipeline); False when the key was claimed meanwhile: the claim fails, the server
        skips the COMMIT, and the session's close rolls the writes back."""
        import psycopg

        driver: Any = s.connection().connection.driver_connection
        try:
            with driver.pipeline():
                driver.cursor().execute(CLAIM_SQL, (key,))
                driver.cursor().execute("COMMIT")
        except psycopg.errors.UniqueViolation:
            return False
        return True

    @app.task(bind=True, name=TASK_OF["keyed"])
    def keyed_insert(self: Any, n: int, tag: str) -> None:
        key = f"krow:{n}"
        with plain_sessions()() as s:
            if s.execute(select(keys.c.state).where(keys.c.key == key)).scalar() == "completed":
                return  # a duplicate: nothing to do (the session's close rolls back)
            s.execute(insert(rows).values(variant="keyed", n=n, tag=tag, task_id=self.request.id))
            claim_and_commit(s, key)

    def run_records() -> Any:
        """This process's connection for the ``recorded`` task's run records."""
        import psycopg

        conn = state.get("runs")
        if conn is None or state.get("runs_pid") != os.getpid():
            conn = psycopg.connect(
                pg_dsn(dbname), autocommit=True, options="-c synchronous_commit=off"
            )
            state.update(runs=conn, runs_pid=os.getpid())
        return conn

    @app.task(bind=True, name=TASK_OF["recorded"])
    def recorded_insert(self: Any, n: int, tag: str) -> None:
        key = f"rrow:{n}"
        records = run_records()
        task_id = self.request.id
        run_id, key_state = records.execute(START_SQL, (task_id, task_id, key)).fetchone()
        outcome = "failed"
        try:
            if key_state == "completed":
                outcome = "duplicate"
                return
            with plain_sessions()() as s:
                s.execute(insert(rows).values(variant="recorded", n=n, tag=tag, task_id=task_id))
                outcome = "succeeded" if claim_and_commit(s, key) else "duplicate"
        finally:
            records.execute(END_SQL, (outcome, run_id))

    @app.task(
        base=celery_gaffer.GafferTask, bind=True, gaffer_key="row:{n}", name=TASK_OF["gaffer"]
    )
    def gaffer_insert(self: Any, n: int, tag: str) -> None:
        with self.session() as s:
            s.execute(insert(rows).values(variant="gaffer", n=n, tag=tag, task_id=self.request.id))

    @app.task(
        base=celery_gaffer.GafferTask,
        bind=True,
        gaffer_key="lrow:{n}",
        name=TASK_OF["gaffer+lease"],
    )
    def gaffer_lease_insert(self: Any, n: int, tag: str) -> None:
        with self.lease(LEASE_NAME), self.session() as s:
            s.execute(
                insert(rows).values(variant="gaffer+lease", n=n, tag=tag, task_id=self.request.id)
            )

    @app.task(
        base=celery_gaffer.GafferTask,
        bind=True,
        gaffer_key="orow:{n}",
        gaffer_overlap="forbid",
        name=TASK_OF["gaffer+overlap"],
    )
    def gaffer_overlap_insert(self: Any, n: int, tag: str) -> None:
        with self.session() as s:
            s.execute(
                insert(rows).values(variant="gaffer+overlap", n=n, tag=tag, task_id=self.request.id)
            )

    @app.task(name="bench.report")
    def report() -> None:
        import psycopg

        data = {
            tag: {k: v for k, v in e.items() if not k.startswith("_")} for tag, e in timing.items()
        }
        with psycopg.connect(pg_dsn(dbname)) as conn:
            conn.execute("INSERT INTO bench_timing (data) VALUES (%s)", (json.dumps(data),))
        timing.clear()

    # part 2 defines its batch tasks on this app (run in-process with .apply())
    app.bench_rows_table = rows  # type: ignore[attr-defined]
    app.bench_url = url  # type: ignore[attr-defined]
    return app


def set_up_otel(mode: str) -> None:
    """The worker's OpenTelemetry (``--otel``): ``absent`` hides the package, as if the
    ``[otel]`` extra were not installed; ``unconfigured`` leaves the API with no SDK (the
    default: whatever is installed, nothing configured); ``sdk`` configures the SDK with
    a span processor that exports to an exporter doing nothing."""
    if mode == "absent":
        sys.modules["opentelemetry"] = None  # type: ignore[assignment]
    elif mode == "sdk":
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            SimpleSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        class Discard(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(Discard()))
        trace.set_tracer_provider(provider)


if os.environ.get(DB_ENV):
    set_up_otel(os.environ.get(OTEL_ENV, "unconfigured"))
app = make_app(os.environ[DB_ENV]) if os.environ.get(DB_ENV) else None


# =====================================================================================
# Orchestration helpers
# =====================================================================================


class Cleanup:
    """Everything to undo on exit, success or not."""

    def __init__(self) -> None:
        self.dbname: str | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self.pyspy: subprocess.Popen[bytes] | None = None

    def kill_worker(self) -> None:
        for attr in ("pyspy", "worker"):
            proc = getattr(self, attr)
            if proc is None or proc.poll() is not None:
                setattr(self, attr, None)
                continue
            try:
                proc.send_signal(signal.SIGINT if attr == "pyspy" else signal.SIGTERM)
                proc.wait(timeout=20 if attr == "pyspy" else 10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            except ProcessLookupError:
                pass
            setattr(self, attr, None)

    def run(self) -> None:
        try:
            self.kill_worker()
        except Exception:  # noqa: BLE001 - keep cleaning up
            traceback.print_exc()
        try:
            from celery_gaffer.store import dispose_engines

            dispose_engines()
        except Exception:  # noqa: BLE001 - keep cleaning up
            traceback.print_exc()
        if self.dbname:
            try:
                drop_database(self.dbname)
            except Exception:  # noqa: BLE001 - keep cleaning up
                traceback.print_exc()
            self.dbname = None
        try:
            flush_redis([REDIS_DB])
        except Exception:  # noqa: BLE001 - keep cleaning up
            traceback.print_exc()


def psql(dbname: str, sql: str, params: Any = None, *, fetch: bool = False) -> Any:
    import psycopg

    with psycopg.connect(pg_dsn(dbname), autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if fetch else None


# =====================================================================================
# Part 1: tasks/s in one real worker
# =====================================================================================


def _die_with_parent() -> None:
    """In the worker child: get SIGTERM if this script dies without cleaning up (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def enqueue_all(bench_app: Any, plan: list[tuple[str, str, int]]) -> float:
    started = time.monotonic()
    n = 0
    with bench_app.producer_or_acquire() as producer:
        for tag, variant, count in plan:
            name = TASK_OF[variant]
            for _ in range(count):
                n += 1
                bench_app.send_task(name, kwargs={"n": n, "tag": tag}, producer=producer)
        bench_app.send_task("bench.report", producer=producer)
    return time.monotonic() - started


def part_tasks(args: argparse.Namespace, cleanup: Cleanup, dbname: str, bench_app: Any) -> dict:
    warm = min(50, args.tasks)
    plan: list[tuple[str, str, int]] = [(f"warm:{v}", v, warm) for v in VARIANTS]
    blocks = max(1, min(args.blocks, args.tasks))
    sizes = [args.tasks // blocks + (1 if b < args.tasks % blocks else 0) for b in range(blocks)]
    for b, size in enumerate(sizes):
        k = b % len(VARIANTS)
        order = VARIANTS[k:] + VARIANTS[:k]  # rotate, so no variant always runs first
        plan += [(f"b{b}:{v}", v, size) for v in order]
    total = sum(c for _, _, c in plan)
    print(f"[tasks] enqueueing {total} messages (+1 report) to Redis DB {REDIS_DB} ...", flush=True)
    took = enqueue_all(bench_app, plan)
    print(f"[tasks] enqueued in {took:.1f} s; starting the worker (--pool=solo)", flush=True)

    # kept (and named in the error) when the worker fails; removed after a good run
    log = tempfile.NamedTemporaryFile(  # noqa: SIM115
        prefix="gaffer_bench_worker_", suffix=".log", delete=False
    )
    env = {
        **os.environ,
        DB_ENV: dbname,
        OTEL_ENV: args.otel,
        "PYTHONPATH": HERE + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    cmd = [
        sys.executable, "-m", "celery", "-A", f"{MODULE}:app", "worker",
        "--pool=solo", "--concurrency=1", "-Q", QUEUE, "-n", f"bench-{os.getpid()}@%h",
        "--loglevel=WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip
    cleanup.worker = subprocess.Popen(
        cmd, cwd=HERE, env=env, stdout=log, stderr=log, preexec_fn=_die_with_parent
    )
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        out = os.path.join(args.profile, "worker.pyspy.txt")
        cleanup.pyspy = subprocess.Popen(
            [pyspy_path(), "record", "--pid", str(cleanup.worker.pid), "--format", "raw",
             "--rate", "250", "--idle", "--output", out, "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    deadline = time.monotonic() + args.task_timeout
    data = None
    while time.monotonic() < deadline:
        if cleanup.worker.poll() is not None:
            raise RuntimeError(f"worker exited {cleanup.worker.returncode}; see {log.name}")
        found = psql(dbname, "SELECT data FROM bench_timing ORDER BY id DESC LIMIT 1", fetch=True)
        if found:
            data = found[0][0]
            break
        time.sleep(0.5)
    cleanup.kill_worker()
    if args.profile:
        summarize_pyspy(os.path.join(args.profile, "worker.pyspy.txt"))
    if data is None:
        done = psql(dbname, "SELECT count(*) FROM bench_rows", fetch=True)[0][0]
        raise RuntimeError(
            f"worker did not finish within {args.task_timeout} s ({done}/{total} rows); "
            f"see {log.name}"
        )
    os.unlink(log.name)

    # sanity: every task wrote its row, every Gaffer run is recorded succeeded
    counts = dict(psql(dbname, "SELECT tag, count(*) FROM bench_rows GROUP BY tag", fetch=True))
    runs = dict(
        psql(dbname, "SELECT state, count(*) FROM gaffer_job_runs GROUP BY state", fetch=True)
    )
    expected_runs = sum(c for _, v, c in plan if v not in PLAIN)
    problems = [
        f"{tag}: {counts.get(tag, 0)}/{c} rows" for tag, _, c in plan if counts.get(tag, 0) != c
    ]
    if runs.get("succeeded", 0) != expected_runs or len(runs) != 1:
        problems.append(f"gaffer_job_runs states {runs} (expected {expected_runs} succeeded)")
    by_hand = dict(
        psql(dbname, "SELECT state, count(*) FROM bench_runs GROUP BY state", fetch=True)
    )
    expected_by_hand = sum(c for _, v, c in plan if v == "recorded")
    if by_hand != {"succeeded": expected_by_hand}:
        problems.append(f"bench_runs states {by_hand} (expected {expected_by_hand} succeeded)")

    # Per variant: all its tasks over the sum of its block windows (first start to last
    # finish of each block); per block, the ratio to the plain block of the same cycle.
    agg = {v: {"count": 0, "window": 0.0, "busy": 0.0} for v in VARIANTS}
    block_rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for tag, variant, _count in plan:
        if tag.startswith("warm:"):
            continue
        e = data[tag]
        window = max(e["last"] - e["first"], 1e-9)
        agg[variant]["count"] += e["count"]
        agg[variant]["window"] += window
        agg[variant]["busy"] += e["busy"]
        block_rates[variant].append(e["count"] / window)
    out = {}
    for v in VARIANTS:
        a = agg[v]
        paired = [g / p for g, p in zip(block_rates[v], block_rates["plain"], strict=True)]
        out[v] = {
            "rate": a["count"] / a["window"],
            "in_task_ms": 1000 * a["busy"] / a["count"],
            "between_ms": 1000 * (a["window"] - a["busy"]) / a["count"],
            "paired_median": statistics.median(paired),
            "block_min": min(block_rates[v]),
            "block_max": max(block_rates[v]),
        }
    return {"variants": out, "problems": problems, "blocks": blocks}


def pyspy_path() -> str:
    import shutil

    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    found = beside if os.path.exists(beside) else shutil.which("py-spy")
    if not found:
        raise RuntimeError("--profile needs py-spy: .venv/bin/pip install py-spy")
    return found


def summarize_pyspy(path: str, top: int = 25) -> None:
    """Inclusive share of celery_gaffer frames among the samples taken inside a task."""
    import re
    from collections import Counter

    if not os.path.exists(path):
        print(f"[profile] no py-spy output at {path}")
        return
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if "trace_task" not in stack:
                continue
            n = int(count)
            total += n
            frames = stack.split(";")
            seen = set()
            for frame in frames:
                label = re.sub(r":\d+\)$", ")", frame)
                if "celery_gaffer" in label and label not in seen:
                    seen.add(label)
                    inclusive[label] += n
            last = re.sub(r":\d+\)$", ")", frames[-1])
            leaf[last] += n
    print(f"[profile] py-spy of the worker: {path}; {total} samples inside trace_task")
    print("[profile] hottest celery_gaffer frames (inclusive % of in-task samples, all variants):")
    for label, n in inclusive.most_common(top):
        print(f"  {100 * n / total:5.1f}%  {label}")
    print("[profile] hottest leaf frames:")
    for label, n in leaf.most_common(10):
        print(f"  {100 * n / total:5.1f}%  {label}")


# =====================================================================================
# Part 2: run_batches against a hand-written loop
# =====================================================================================


def setup_items(dbname: str, table: str, rows: int) -> None:
    psql(dbname, f"DROP TABLE IF EXISTS {table}")
    psql(
        dbname,
        f"CREATE TABLE {table} (id bigint PRIMARY KEY, counter integer NOT NULL DEFAULT 0,"
        f" payload text NOT NULL)"
        # every row is updated once: autovacuum would start at some random point in the
        # middle of one variant's run and slow it down, not the other
        f" WITH (autovacuum_enabled = false)",
    )
    psql(
        dbname,
        f"INSERT INTO {table} (id, counter, payload) "  # noqa: S608 - our own table name
        f"SELECT g, 0, md5(g::text) FROM generate_series(1, %s) g",
        (rows,),
    )
    psql(dbname, f"VACUUM ANALYZE {table}")


def item_models() -> dict[str, Any]:
    from sqlalchemy import BigInteger, Integer, Text
    from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

    class Base(DeclarativeBase):
        pass

    models: dict[str, Any] = {}
    for variant in ("hand", "gaffer"):
        attrs = {
            "__tablename__": f"bench_items_{variant}",
            "id": mapped_column(BigInteger, primary_key=True),
            "counter": mapped_column(Integer),
            "payload": mapped_column(Text),
            "__annotations__": {"id": Mapped[int], "counter": Mapped[int], "payload": Mapped[str]},
        }
        models[variant] = type(f"Item_{variant}", (Base,), attrs)
    return models


def make_work(model: Any, lo: int, hi: int) -> tuple[Any, Any, Any]:
    """fetch / handle / key over the rows ``lo < id <= hi`` (keyset pagination)."""
    from sqlalchemy import select

    def fetch(session: Any, after: Any, limit: int) -> list[Any]:
        start = lo if after is None else max(int(after), lo)
        query = (
            select(model).where(model.id > start, model.id <= hi).order_by(model.id).limit(limit)
        )
        return list(session.scalars(query))

    def handle(session: Any, row: Any) -> None:
        row.counter += 1

    def key(row: Any) -> int:
        return int(row.id)

    return fetch, handle, key


def part_batches(args: argparse.Namespace, dbname: str, bench_app: Any) -> dict:
    from sqlalchemy import create_engine, func, text
    from sqlalchemy.dialects.postgresql import insert as pg_insert
    from sqlalchemy.orm import sessionmaker

    import celery_gaffer

    url = bench_app.bench_url
    models = item_models()
    print(f"[batches] creating 2 x {args.rows} rows ...", flush=True)
    for variant in ("hand", "gaffer"):
        setup_items(dbname, f"bench_items_{variant}", args.rows)

    from sqlalchemy import BigInteger, Column, DateTime, MetaData, Table, Text
    from sqlalchemy.dialects.postgresql import JSONB

    cursors = Table(
        "bench_cursors",
        MetaData(),
        Column("name", Text, primary_key=True),
        Column("value", JSONB),
        Column("processed", BigInteger),
        Column("updated_at", DateTime(timezone=True)),
    )
    hand_engine = create_engine(url)
    hand_sessions = sessionmaker(bind=hand_engine, expire_on_commit=False)

    @bench_app.task(bind=True, name="bench.hand_batches")
    def hand_batches(self: Any, tag: str, lo: int, hi: int) -> int:
        fetch, handle, key = make_work(models["hand"], lo, hi)
        name = f"hand:{tag}"
        with hand_sessions() as s:
            value = s.execute(
                text("SELECT value FROM bench_cursors WHERE name = :n"), {"n": name}
            ).scalar()
        processed = 0
        while True:
            with hand_sessions() as s:
                rows = fetch(s, value, BATCH_SIZE)
                for row in rows:
                    handle(s, row)
                if rows:
                    value = key(rows[-1])
                stmt = pg_insert(cursors).values(
                    name=name, value=value, processed=len(rows), updated_at=func.now()
                )
                s.execute(
                    stmt.on_conflict_do_update(
                        index_elements=[cursors.c.name],
                        set_={
                            "value": stmt.excluded.value,
                            "processed": cursors.c.processed + len(rows),
                            "updated_at": stmt.excluded.updated_at,
                        },
                    )
                )
                s.commit()
            processed += len(rows)
            if len(rows) < BATCH_SIZE:
                return processed

    @bench_app.task(
        base=celery_gaffer.GafferTask,
        bind=True,
        gaffer_key="batches:{tag}",
        name="bench.gaffer_batches",
    )
    def gaffer_batches(self: Any, tag: str, lo: int, hi: int) -> int:
        fetch, handle, key = make_work(models["gaffer"], lo, hi)
        report = self.run_batches(f"items:{tag}", fetch, handle, key=key, batch_size=BATCH_SIZE)
        return int(report.processed)

    tasks = {"hand": hand_batches, "gaffer": gaffer_batches}
    # The rows are split into segments; each segment is one call of each variant (its own
    # cursor, key and lease), the two variants alternating with the order flipped every
    # segment, so that load from elsewhere on the machine hits both alike.
    segments = max(1, min(args.segments, args.rows // BATCH_SIZE or 1))
    bounds = [(args.rows * k // segments, args.rows * (k + 1) // segments) for k in range(segments)]
    totals = {v: {"wall": 0.0, "cpu": 0.0} for v in tasks}
    seg_rates: dict[str, list[float]] = {v: [] for v in tasks}
    profiler = cProfile.Profile() if args.profile else None
    for k, (lo, hi) in enumerate(bounds):
        order = ("hand", "gaffer") if k % 2 == 0 else ("gaffer", "hand")
        for variant in order:
            started, cpu = time.perf_counter(), time.process_time()
            if profiler is not None and variant == "gaffer":
                profiler.enable()
            result = tasks[variant].apply(kwargs={"tag": f"s{k}", "lo": lo, "hi": hi})
            if profiler is not None:
                profiler.disable()
            took, cpu = time.perf_counter() - started, time.process_time() - cpu
            if result.failed():
                raise RuntimeError(f"{variant} batches failed: {result.traceback}")
            if result.get() != hi - lo:
                raise RuntimeError(f"{variant} processed {result.get()} of {hi - lo} rows")
            totals[variant]["wall"] += took
            totals[variant]["cpu"] += cpu
            seg_rates[variant].append((hi - lo) / took)
        hand, gaffer = seg_rates["hand"][-1], seg_rates["gaffer"][-1]
        print(f"[batches] segment {k + 1}/{segments} ({hi - lo} rows): "
              f"hand {hand:,.0f} rows/s, gaffer {gaffer:,.0f} rows/s", flush=True)  # fmt: skip
    hand_engine.dispose()
    # sanity: every row was incremented once per pass
    problems = []
    for variant in ("hand", "gaffer"):
        bad = psql(
            dbname,
            f"SELECT count(*) FROM bench_items_{variant} WHERE counter <> 1",  # noqa: S608
            fetch=True,
        )[0][0]
        if bad:
            problems.append(f"bench_items_{variant}: {bad} rows with a wrong counter")
    if profiler is not None:
        os.makedirs(args.profile, exist_ok=True)
        path = os.path.join(args.profile, "batches_gaffer.prof")
        profiler.dump_stats(path)
        print(f"[batches] cProfile of the run_batches calls: {path}")
        pstats.Stats(path).sort_stats("cumulative").print_stats("celery_gaffer", 25)
    return {
        "hand": args.rows / totals["hand"]["wall"],
        "gaffer": args.rows / totals["gaffer"]["wall"],
        "cpu_us": {v: 1e6 * t["cpu"] / args.rows for v, t in totals.items()},
        "paired_median": statistics.median(
            g / h for g, h in zip(seg_rates["gaffer"], seg_rates["hand"], strict=True)
        ),
        "segments": segments,
        "problems": problems,
    }


# =====================================================================================
# main
# =====================================================================================


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tasks", type=int, default=None, help="tasks per variant per round (2000)")
    p.add_argument("--blocks", type=int, default=None, help="interleaved blocks per variant (10)")
    p.add_argument("--rows", type=int, default=None, help="rows for run_batches (1000000)")
    p.add_argument("--segments", type=int, default=None, help="interleaved batch segments (10)")
    p.add_argument("--quick", action="store_true", help="300 tasks per variant, 100k rows")
    p.add_argument("--only", default="tasks,batches", help="comma list of: tasks, batches")
    p.add_argument("--profile", metavar="DIR", help="py-spy the worker, cProfile run_batches")
    p.add_argument("--task-timeout", type=float, default=None, help="seconds for part 1")
    p.add_argument(
        "--otel",
        choices=("absent", "unconfigured", "sdk"),
        default="unconfigured",
        help="the worker's OpenTelemetry: hidden, API without an SDK (default), SDK",
    )
    a = p.parse_args(argv)
    if a.quick:
        a.tasks = a.tasks or 300
        a.blocks = a.blocks or 6
        a.rows = a.rows or 100_000
        a.segments = a.segments or 4
    a.tasks = a.tasks or 2000
    a.blocks = a.blocks or 10
    a.rows = a.rows or 1_000_000
    a.segments = a.segments or 10
    a.task_timeout = a.task_timeout or max(120.0, 0.1 * a.tasks * 3 + 60)
    a.only = {s.strip() for s in a.only.split(",") if s.strip()}
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cleanup = Cleanup()

    def _terminate(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _terminate)
    t0 = time.monotonic()
    print(f"load average at start: {os.getloadavg()}  cores: {os.cpu_count()}")
    try:
        flush_redis([REDIS_DB])
        dbname = new_database_name("task")
        create_database(dbname)
        cleanup.dbname = dbname
        psql(dbname, ROWS_DDL)
        import celery_gaffer.store

        bench_app = make_app(dbname)
        celery_gaffer.store.database_for(bench_app).migrate()

        missed = []
        lines = []
        if "tasks" in args.only:
            res = part_tasks(args, cleanup, dbname, bench_app)
            plain = res["variants"]["plain"]["rate"]
            rows = []
            for v in VARIANTS:
                b = res["variants"][v]
                rows.append(
                    [v, f"{b['rate']:.0f}", f"{b['rate'] / plain:.2f}x",
                     f"{b['paired_median']:.2f}x", f"{b['in_task_ms']:.2f}",
                     f"{b['between_ms']:.2f}", f"{b['block_min']:.0f}-{b['block_max']:.0f}"]
                )  # fmt: skip
            print()
            print(f"Part 1: one `celery worker --pool=solo --concurrency=1` process, "
                  f"{args.tasks} tasks per variant in {res['blocks']} interleaved blocks, "
                  f"all enqueued up front")  # fmt: skip
            print(format_table(
                ["variant", "tasks/s", "vs plain", "paired median", "in-task ms",
                 "between ms", "block tasks/s"], rows))  # fmt: skip
            print("  in-task: task_prerun to task_postrun (Gaffer's run-record writes included);"
                  " between: broker fetch/ack and Celery between tasks")  # fmt: skip
            for problem in res["problems"]:
                print(f"  CHECK FAILED: {problem}")
            keyed, recorded = res["variants"]["keyed"], res["variants"]["recorded"]
            gaffer_rate = res["variants"]["gaffer"]["rate"]
            print(f"  floors by hand (paired medians vs plain): keyed "
                  f"{keyed['paired_median']:.2f}x, recorded {recorded['paired_median']:.2f}x;"
                  f" gaffer {gaffer_rate / keyed['rate']:.2f}x keyed and "
                  f"{gaffer_rate / recorded['rate']:.2f}x recorded overall")  # fmt: skip
            for v in ("gaffer", "gaffer+lease", "gaffer+overlap"):
                # the verdict uses the paired median (robust to load from elsewhere)
                ratio = res["variants"][v]["paired_median"]
                ok = ratio >= TARGET_TASKS[v]
                overall = res["variants"][v]["rate"] / plain
                lines.append(
                    f"{'MET ' if ok else 'MISS'} {v} >= {TARGET_TASKS[v]}x plain: "
                    f"{ratio:.2f}x paired median ({overall:.2f}x overall)"
                )
                if not ok:
                    missed.append(v)
            if res["problems"]:
                missed.append("task checks")
        if "batches" in args.only:
            res2 = part_batches(args, dbname, bench_app)
            ratio = res2["gaffer"] / res2["hand"]
            paired = res2["paired_median"]
            print()
            print(f"Part 2: {args.rows} rows, batch_size {BATCH_SIZE}, in-process task.apply(), "
                  f"{res2['segments']} interleaved segments per variant")  # fmt: skip
            print(format_table(
                ["variant", "rows/s", "vs hand", "paired median", "client CPU us/row"],
                [["hand-written loop", f"{res2['hand']:,.0f}", "1.00x", "1.00x",
                  f"{res2['cpu_us']['hand']:.1f}"],
                 ["run_batches", f"{res2['gaffer']:,.0f}", f"{ratio:.2f}x",
                  f"{res2['paired_median']:.2f}x",
                  f"{res2['cpu_us']['gaffer']:.1f}"]]))  # fmt: skip
            for problem in res2["problems"]:
                print(f"  CHECK FAILED: {problem}")
            ok = paired >= TARGET_BATCHES
            lines.append(
                f"{'MET ' if ok else 'MISS'} run_batches >= {TARGET_BATCHES}x hand loop: "
                f"{paired:.2f}x paired median ({ratio:.2f}x overall)"
            )
            if not ok:
                missed.append("run_batches")
            if res2["problems"]:
                missed.append("batch checks")
        print()
        print("Targets:")
        for line in lines:
            print("  " + line)
        print(f"load average at end: {os.getloadavg()}  elapsed: {time.monotonic() - t0:.0f} s")
        return 1 if missed else 0
    finally:
        cleanup.run()


if __name__ == "__main__":
    sys.exit(main())
