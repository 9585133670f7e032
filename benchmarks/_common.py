"""Helpers shared by the benchmark scripts: throwaway databases, Redis, subprocesses.

Everything talks to 127.0.0.1 only. Benchmark-only packages (celery-redbeat,
django-celery-beat, Django) are imported lazily by the scripts that need them and are
never dependencies of celery-gaffer.
"""

from __future__ import annotations

import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

PG_HOST = "127.0.0.1"
PG_PORT = 5432
PG_USER = "postgres"
REDIS_HOST = "127.0.0.1"
REDIS_PORT = 6379
#: The only Redis databases a benchmark may use (and flush).
REDIS_DBS = (12, 13, 14)
#: task_overhead.py's own database.
TASK_REDIS_DB = 11
RESULT_PREFIX = "RESULT "


# -- PostgreSQL -----------------------------------------------------------------------


def pg_dsn(dbname: str) -> str:
    """A libpq DSN (for psycopg) of a database on the local server."""
    return f"host={PG_HOST} port={PG_PORT} user={PG_USER} dbname={dbname}"


def pg_sqlalchemy_url(dbname: str) -> str:
    return f"postgresql+psycopg://{PG_USER}@{PG_HOST}:{PG_PORT}/{dbname}"


def new_database_name(label: str) -> str:
    """``gaffer_bench_<random>_<label>``: never ``test`` nor anyone else's database."""
    return f"gaffer_bench_{secrets.token_hex(4)}_{label}"


def create_database(name: str) -> None:
    import psycopg

    _check_own(name)
    with psycopg.connect(pg_dsn("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(name: str) -> None:
    """Drop one of our throwaway databases (closing any connection still open to it)."""
    import psycopg

    _check_own(name)
    with psycopg.connect(pg_dsn("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _check_own(name: str) -> None:
    if not name.startswith("gaffer_bench_") or not name.replace("_", "").isalnum():
        raise ValueError(f"refusing to touch database {name!r}: not a benchmark database")


# -- Redis ----------------------------------------------------------------------------


def redis_url(db: int) -> str:
    _check_redis_db(db)
    return f"redis://{REDIS_HOST}:{REDIS_PORT}/{db}"


def redis_client(db: int) -> Any:
    import redis

    _check_redis_db(db)
    return redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=db)


#: The key a benchmark leaves in each Redis database it empties: a database holding keys
#: but not this one has data no benchmark made, and is never emptied.
REDIS_OWNER_KEY = "gaffer-benchmark-owner"


def flush_redis(dbs: Iterable[int] = REDIS_DBS) -> None:
    """Empty the benchmark's Redis databases, each only when it is empty or a benchmark
    made what it holds (:data:`REDIS_OWNER_KEY`); otherwise stop, saying which."""
    for db in dbs:
        client = redis_client(db)
        if client.dbsize() and not client.exists(REDIS_OWNER_KEY):
            raise SystemExit(
                f"benchmark: Redis DB {db} on {REDIS_HOST}:{REDIS_PORT} holds keys no "
                "benchmark made; refusing to empty it (empty it yourself to use it)"
            )
        client.flushdb()
        client.set(REDIS_OWNER_KEY, "1")


def _check_redis_db(db: int) -> None:
    if db not in (TASK_REDIS_DB, *REDIS_DBS):
        raise ValueError(f"refusing to use Redis DB {db}: benchmarks use only 11 to 14")


# -- measuring ------------------------------------------------------------------------


def peak_rss_mb() -> float:
    """Peak resident set size of this process (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def emit_result(result: dict[str, Any]) -> None:
    """What a worker subprocess hands back to its parent (one line on stdout)."""
    sys.stdout.write(RESULT_PREFIX + json.dumps(result, default=str) + "\n")
    sys.stdout.flush()


class WorkerFailed(RuntimeError):
    pass


def run_worker(
    script: str,
    role: str,
    params: dict[str, Any],
    *,
    timeout: float,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``script --worker role`` in a fresh interpreter; return what it emitted.

    The child is killed when it overruns ``timeout`` seconds.
    """
    cmd = [sys.executable, script, "--worker", role, "--params", json.dumps(params)]
    child_env = {**os.environ, **(env or {})}
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise WorkerFailed(f"{role} overran its {timeout:.0f} s limit\n{_tail(err)}") from None
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise WorkerFailed(f"{role} exited {proc.returncode}\n{_tail(err)}")
    for line in reversed(out.splitlines()):
        if line.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
            result.setdefault("wall_s", time.monotonic() - started)
            return result
    raise WorkerFailed(f"{role} emitted no result\n{_tail(err)}")


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# -- printing -------------------------------------------------------------------------


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
