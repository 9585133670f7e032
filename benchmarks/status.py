"""`celery gaffer status` at 100,000 and 1,000,000 schedules against a plain SELECT of the
same rows.

    .venv/bin/python benchmarks/status.py                    # 100,000 and 1,000,000: ~8 min
    .venv/bin/python benchmarks/status.py --sizes 100000     # ~1 min
    make bench-status

For each size, a throwaway PostgreSQL database is filled with ``ScheduleStore.add_many``
(per-tenant schedules ``tenant-<i>`` sharing 400 timings, as ``load.py``: daily crons in
four zones and ``every`` of 1-5 minutes; every hundredth paused, every thousandth in
error), the ledger gets each schedule's last fire, then ``VACUUM ANALYZE``. Two states
of the database are measured:

* **Beat current**: every stored health word holds (``check_at`` a day ahead), except
  every thousandth schedule, stored ``late``, which ``status`` re-evaluates;
* **Beat stopped a day ago**: no stored word holds (``check_at`` a day ago), so
  ``status`` evaluates every enabled schedule with Beat's rules, the ledger looked up
  for each (the worst case).

Each figure runs a real ``celery -A benchproj gaffer status`` (and ``--json``, and
``--problems``) as a subprocess, its output written to a file and counted, and takes
its wall time and its peak RSS (through ``/usr/bin/time``): the fastest of ``--repeat``
runs (default 3; the machine is usually shared with other work). The reference is
``psql`` running a plain ``SELECT`` of the same columns of every schedule, ordered by
name, measured the same way.

It also runs ``status`` on a database without schedules (the fixed cost: the interpreter,
Celery and its plugins) and prints it. Exits 1 when ``status`` (text or ``--json``)
misses its targets: under 2 s and 200 MB at 100,000 schedules, under 15 s at 1,000,000,
in either state.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import (
    PG_HOST,
    PG_PORT,
    PG_USER,
    create_database,
    drop_database,
    format_table,
    new_database_name,
    pg_dsn,
    pg_sqlalchemy_url,
)

ROOT = Path(__file__).resolve().parents[1]
UTC = timezone.utc
TASK = "benchproj.report"
ZONES = ("UTC", "Europe/London", "America/New_York", "Asia/Tokyo")
#: (schedules, seconds, MB): the targets; None where there is none.
TARGETS = {100_000: (2.0, 200.0), 1_000_000: (15.0, None)}
PROJECT = f"""
import os
from celery import Celery

app = Celery("benchproj", broker="memory://")
app.conf.gaffer_database_url = os.environ["BENCH_DATABASE"]


@app.task(name={TASK!r})
def report():
    return None
"""
# The columns ``status`` reads, as the reference fetches them.
SELECT = (
    "SELECT name, schedule::text, enabled, error, grace, watermark_at, next_fire_at, health,"
    " consecutive_failures, last_success_at, last_success_nominal_at, start_at, end_at,"
    " max_runs, fired_count, check_at FROM gaffer_schedules ORDER BY name"
)


def timing(i: int) -> Any:
    """One of 400 timings, shared by the tenants (as load.py)."""
    from celery_gaffer import cron, every

    kind = i % 400
    if kind < 200:
        return cron(f"{kind % 60} {kind % 24} * * *", ZONES[kind % 4])
    return every(60 * (1 + kind % 5))


def load(database: str, count: int) -> None:
    """``count`` schedules through ``add_many``, a fire each in the ledger, VACUUM ANALYZE."""
    import psycopg
    from celery import Celery

    from celery_gaffer import ScheduleStore
    from celery_gaffer.store import database_for

    app = Celery("bench", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = pg_sqlalchemy_url(database)
    database_for(app).migrate()
    entries = (
        {"name": f"tenant-{i:07d}", "task": TASK, "schedule": timing(i), "kwargs": {"tenant": i}}
        for i in range(count)
    )
    ScheduleStore(app, check_tasks=False).add_many(entries)
    database_for(app).engine.dispose()
    with psycopg.connect(pg_dsn(database), autocommit=True) as conn:
        conn.execute("UPDATE gaffer_schedules SET enabled = false WHERE name LIKE '%00'")
        conn.execute(
            "UPDATE gaffer_schedules SET error = 'task: ''benchproj.gone'' is not registered"
            " with this Beat''s app' WHERE name LIKE '%500'"
        )
        # The ledger: each schedule's fire of an hour ago (what a running Beat leaves).
        conn.execute(
            """
            INSERT INTO gaffer_fires (schedule, nominal_at, key, task_id, kind, state,
                publish_after, publish_count, created_at, sent_at)
            SELECT name, date_trunc('hour', now()) - interval '1 hour',
                name || '@' || to_char(date_trunc('hour', now()) - interval '1 hour',
                    'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                md5(name), 'scheduled', 'sent', now(), 1, now(), now()
            FROM gaffer_schedules
            """
        )
        conn.execute("VACUUM ANALYZE gaffer_schedules")
        conn.execute("VACUUM ANALYZE gaffer_fires")


def beat_current(database: str) -> None:
    """Every stored word holds for a day, but every thousandth's, stored ``late``."""
    _set(
        database,
        "UPDATE gaffer_schedules SET check_at = now() + interval '1 day',"
        " health = CASE WHEN name LIKE '%250' THEN 'late' ELSE 'ok' END",
    )


def beat_stopped(database: str) -> None:
    """No stored word holds: Beat last checked them a day ago."""
    _set(database, "UPDATE gaffer_schedules SET check_at = now() - interval '1 day'")


def _set(database: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(pg_dsn(database), autocommit=True) as conn:
        conn.execute(statement)
        conn.execute("VACUUM ANALYZE gaffer_schedules")


def measured(command: list[str], folder: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run ``command`` to completion, its stdout in a file: wall time, peak RSS, lines.

    Through ``/usr/bin/time``: a child forked from this process would count this
    process's own memory (the schedules just loaded) in its peak until it execs.
    """
    output, usage = folder / "out.txt", folder / "usage.txt"
    timed = ["/usr/bin/time", "-f", "%e %M", "-o", str(usage), *command]
    with output.open("wb") as stdout:
        done = subprocess.run(timed, cwd=folder, env=env, stdout=stdout, stderr=subprocess.PIPE)
    if done.returncode not in (0, 1):
        tail = done.stderr.decode(errors="replace")[-2000:]
        raise RuntimeError(f"{' '.join(command[:8])} exited {done.returncode}: {tail}")
    seconds, kib = usage.read_text().split()[-2:]
    with output.open("rb") as lines:
        count = sum(1 for _ in lines)
    return {
        "seconds": float(seconds),
        "mb": int(kib) / 1024.0,
        "lines": count,
        "exit": done.returncode,
    }


def environment(database: str, folder: Path) -> dict[str, str]:
    return {
        **os.environ,
        "BENCH_DATABASE": pg_sqlalchemy_url(database),
        "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)]),
    }


def startup(folder: Path) -> dict[str, Any]:
    """``status`` on a migrated database without schedules: what every run pays first."""
    database = new_database_name("status0")
    create_database(database)
    try:
        load(database, 0)
        command = [sys.executable, "-m", "celery", "-A", "benchproj", "gaffer", "status"]
        runs = [measured(command, folder, environment(database, folder)) for _ in range(3)]
    finally:
        drop_database(database)
    return min(runs, key=lambda run: float(run["seconds"]))


def fastest(command: list[str], folder: Path, env: dict[str, str], repeat: int) -> dict[str, Any]:
    """:func:`measured`, the fastest of ``repeat`` runs."""
    runs = [measured(command, folder, env) for _ in range(max(1, repeat))]
    return min(runs, key=lambda run: float(run["seconds"]))


def run_size(count: int, folder: Path, repeat: int = 3) -> list[dict[str, Any]]:
    database = new_database_name(f"status{count}")
    create_database(database)
    try:
        started = time.perf_counter()
        load(database, count)
        print(f"{count:,} schedules stored in {time.perf_counter() - started:.1f} s", flush=True)
        env = environment(database, folder)
        celery = [sys.executable, "-m", "celery", "-A", "benchproj", "gaffer", "status"]
        psql = ["psql", "-X", "-q", "-A", "-t", "-h", PG_HOST, "-p", str(PG_PORT)]
        psql += ["-U", PG_USER, "-d", database, "-c", SELECT]
        rows = []
        for state, prepare in (("Beat current", beat_current), ("Beat stopped", beat_stopped)):
            prepare(database)
            reference = fastest(psql, folder, env, repeat)
            if reference["lines"] != count:
                raise RuntimeError(f"psql printed {reference['lines']} rows, not {count}")
            for options in ((), ("--json",), ("--problems",)):
                result = fastest([*celery, *options], folder, env, repeat)
                expected = count + 2 if not options else count
                if options != ("--problems",) and result["lines"] != expected:
                    raise RuntimeError(f"status {options} printed {result['lines']} lines")
                rows.append(
                    {
                        "schedules": count,
                        "state": state,
                        "command": " ".join(("status", *options)),
                        "status": result,
                        "select": reference,
                    }
                )
                print(
                    f"  {state}, status {' '.join(options)}: {result['seconds']:.2f} s, "
                    f"{result['mb']:.0f} MB ({result['lines']:,} lines, exit {result['exit']});"
                    f" SELECT {reference['seconds']:.2f} s, {reference['mb']:.0f} MB",
                    flush=True,
                )
        return rows
    finally:
        drop_database(database)


def missed(row: dict[str, Any]) -> list[str]:
    seconds, mb = TARGETS.get(row["schedules"], (None, None))
    if row["command"] == "status --problems":
        return []
    result = row["status"]
    found = []
    if seconds is not None and result["seconds"] >= seconds:
        found.append(
            f"{row['command']} at {row['schedules']:,} ({row['state']}): "
            f"{result['seconds']:.2f} s, target {seconds:.0f} s"
        )
    if mb is not None and result["mb"] >= mb:
        found.append(
            f"{row['command']} at {row['schedules']:,} ({row['state']}): "
            f"{result['mb']:.0f} MB, target {mb:.0f} MB"
        )
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each figure (fastest)")
    args = parser.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="gaffer-bench-status-") as name:
        folder = Path(name)
        (folder / "benchproj.py").write_text(PROJECT)
        fixed = startup(folder)
        for count in args.sizes:
            results += run_size(count, folder, args.repeat)
    print()
    print(
        f"startup: status on an empty database takes {fixed['seconds']:.2f} s and "
        f"{fixed['mb']:.0f} MB (the interpreter, Celery and its plugins, the app, the check)"
    )
    print(
        format_table(
            [
                "schedules",
                "Beat",
                "command",
                "status s",
                "status MB",
                "SELECT s",
                "SELECT MB",
                "time ratio",
                "RSS ratio",
            ],
            [
                [
                    f"{r['schedules']:,}",
                    r["state"],
                    r["command"],
                    f"{r['status']['seconds']:.2f}",
                    f"{r['status']['mb']:.0f}",
                    f"{r['select']['seconds']:.2f}",
                    f"{r['select']['mb']:.0f}",
                    f"{r['status']['seconds'] / r['select']['seconds']:.1f}x",
                    f"{r['status']['mb'] / r['select']['mb']:.1f}x",
                ]
                for r in results
            ],
        )
    )
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    failures = [line for row in results for line in missed(row)]
    if failures:
        print("targets missed:\n  " + "\n  ".join(failures))
        return 1
    print("targets met: status under 2 s and 200 MB at 100,000 schedules, under 15 s at 1,000,000")
    return 0


if __name__ == "__main__":
    sys.exit(main())
