"""`make demo`: celery-gaffer's guarantees, shown in about a minute with no servers.

Everything runs on the embedded default (a SQLite file and kombu's filesystem broker
under ``var/``, wiped at the start): two real ``celery beat -S gaffer`` processes and
real ``celery worker`` processes. Each step (``demo_steps.py``) prints what it does,
then evidence read back from the Gaffer database, the Beats' logs or the ``celery
gaffer`` CLI. The demo exits 0 only if every step's evidence holds, otherwise 1 with a
one-line reason on stderr.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

from demo_kit import APP, HERE, VAR, DemoFailed, Processes, check, gaffer, say


def main() -> int:
    # The app reads these at import: the demo's schedules on the embedded default,
    # whatever the environment says (the demo never needs a server).
    os.environ["BILLING_DEMO"] = "1"
    for name in ("BILLING_VAR", "CELERY_BROKER_URL", "GAFFER_DATABASE_URL"):
        os.environ.pop(name, None)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(HERE), os.environ.get("PYTHONPATH")])
    )
    shutil.rmtree(VAR, ignore_errors=True)  # a fresh database and broker on every run
    for folder in ("broker/queue", "broker/control", "broker/processed", "logs"):
        (VAR / folder).mkdir(parents=True)

    from demo_steps import Steps  # imports the app, so after the environment is set

    started = time.monotonic()
    processes = Processes()
    try:
        say("celery-gaffer demo: SQLite + kombu's filesystem broker in var/, no servers.")
        migrated = gaffer("migrate", show=False)
        check(migrated.returncode == 0, f"gaffer migrate failed: {migrated.stderr.strip()}")
        steps = Steps(processes)
        say(f"Migrated the Gaffer tables, seeded {steps.seed()} invoices.")
        for number in (1, 2):
            processes.start(
                f"beat-{number}",
                *("beat", "-S", "gaffer", "--loglevel=INFO"),
                f"--schedule={VAR / f'beat-{number}.schedule'}",
                f"--pidfile={VAR / f'beat-{number}.pid'}",
            )
        processes.start(
            "worker",
            *("worker", "-Q", "celery", "-n", "billing@%h"),
            *("--pool=prefork", "--concurrency=3", "--loglevel=INFO"),
        )
        say(
            "Started two Beats (beat-1, beat-2) and a worker for queue 'celery' (logs in var/logs)."
        )
        for step in (
            steps.two_beats,
            steps.duplicate,
            steps.overlap,
            steps.fence,
            steps.explain,
            steps.late_then_ok,
        ):
            step()
            processes.check_alive()
    except DemoFailed as failure:
        print(f"demo failed: {failure}", file=sys.stderr, flush=True)
        return 1
    except Exception as exc:  # noqa: BLE001 - one line, as every failure of the demo
        print(f"demo failed: unexpected {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        processes.stop_all()
    say()
    say(f"Every step's evidence held; {time.monotonic() - started:.0f} s. Logs and database: var/")
    say("The web console shows what it left (schedules, runs, alerts) at http://127.0.0.1:5557/:")
    say(f"   $ {console_command()}")
    if importlib.util.find_spec("uvicorn") is None:
        say("   (it needs the web extra: pip install 'celery-gaffer[web]')")
    return 0


def console_command() -> str:
    """The command that serves the console on the demo's database, to paste as it is
    wherever the user is: this virtualenv's ``celery`` (``make demo``'s has the web
    extra), run from this folder."""
    celery = os.path.relpath(Path(sys.executable).parent / "celery", HERE)
    return f"cd {shlex.quote(str(HERE))} && {shlex.quote(celery)} -A {APP} gaffer web"


if __name__ == "__main__":
    sys.exit(main())
