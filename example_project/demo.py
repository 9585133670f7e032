"""`make demo`: the whole thing on the embedded default, in about a minute.

Migrates, seeds invoices, starts Beat and a worker (SQLite database, kombu's filesystem
broker: no servers), lets several fires happen, prints `celery gaffer status` and the
latest runs, stops its processes and exits 0.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
VAR = HERE / "var"
SECONDS = float(os.environ.get("DEMO_SECONDS", "65"))


def celery(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "billing.celery_app", *args]


def main() -> int:
    env = {**os.environ, "BILLING_DEMO": "1", "PYTHONPATH": str(HERE)}
    env.pop("CELERY_BROKER_URL", None)
    env.pop("GAFFER_DATABASE_URL", None)
    # A fresh broker folder each time; the database (and its history) is kept.
    shutil.rmtree(VAR / "broker", ignore_errors=True)
    for folder in ("broker/queue", "broker/control", "broker/processed", "logs"):
        (VAR / folder).mkdir(parents=True, exist_ok=True)

    subprocess.run(celery("gaffer", "migrate"), cwd=HERE, env=env, check=True)
    subprocess.run([sys.executable, "-m", "billing.seed"], cwd=HERE, env=env, check=True)

    processes = []
    try:
        for name, args in (
            ("worker", ("worker", "--pool=prefork", "-c", "2", "--loglevel=INFO")),
            ("beat", ("beat", "-S", "gaffer", "--loglevel=INFO", "-s", str(VAR / "beat"))),
        ):
            log = (VAR / "logs" / f"{name}.log").open("wb")
            processes.append(
                subprocess.Popen(
                    celery(*args),
                    cwd=HERE,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        print(f"Beat and a worker are running for {SECONDS:.0f} s (logs in {VAR / 'logs'}) ...")
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline:
            for process in processes:
                if process.poll() is not None:
                    print(f"a demo process exited early with {process.returncode}", file=sys.stderr)
                    return 1
            time.sleep(1)
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)

    print("\n$ celery -A billing.celery_app gaffer status")
    subprocess.run(celery("gaffer", "status"), cwd=HERE, env=env, check=False)
    print("\n$ celery -A billing.celery_app gaffer runs --scheduled --limit 15")
    subprocess.run(
        celery("gaffer", "runs", "--scheduled", "--limit", "15"), cwd=HERE, env=env, check=True
    )
    outbox = VAR / "outbox.jsonl"
    if outbox.exists():
        lines = outbox.read_text().splitlines()
        print(f"\n{len(lines)} reminder e-mails in {outbox} (one per invoice and day)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
