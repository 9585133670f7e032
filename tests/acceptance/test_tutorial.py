"""The home page's quickstart and the tutorial, followed as written, with real processes.

Each page is run by :mod:`tests.docs_runner` in a fresh folder: its files saved, its
commands run in order. The worker, Beat and the web console the page starts are real
``celery`` processes (:class:`~tests.docs_processes.Background`), stopped when the page
ends; before the first command that reads what they did, the test waits (at most a
minute) until a schedule fired and its run was recorded. The one substitution: the
console listens on a free port instead of 5557, and the page's later commands are
pointed at it. Afterwards the test reads the Gaffer database the page left.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from ..docs_processes import CONSOLE, Background
from ..docs_runner import DOCS, run_page

pytestmark = pytest.mark.acceptance


def _rows(folder: Path, sql: str) -> list[tuple[Any, ...]]:
    engine = create_engine(f"sqlite:///{folder / 'gaffer.sqlite3'}")
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(sql))]
    finally:
        engine.dispose()


def _succeeded(folder: Path, schedule: str) -> int:
    sql = (
        "SELECT count(*) FROM gaffer_job_runs "
        f"WHERE schedule = '{schedule}' AND state = 'succeeded'"
    )
    return int(_rows(folder, sql)[0][0])


def _states_of_key(folder: Path, key: str) -> list[str]:
    sql = f"SELECT state FROM gaffer_job_runs WHERE key = '{key}' ORDER BY state"
    return [str(row[0]) for row in _rows(folder, sql)]


def _sent_once(folder: Path) -> None:
    """Each fire is one ledger row, unique by schedule and nominal time."""
    fires = _rows(folder, "SELECT schedule, nominal_at FROM gaffer_fires")
    assert fires
    assert len(set(fires)) == len(fires)


def test_the_quickstart_runs_as_written(tmp_path: Path) -> None:
    processes = Background(lambda folder: _succeeded(folder, "heartbeat") >= 1)
    page = run_page(DOCS / "index.md", tmp_path, services=processes)

    assert "file proj.py" in page.ran
    assert processes.kinds() == ["worker", "beat"]
    status = page.outputs["celery -A proj gaffer status"].stdout
    assert re.search(r"^heartbeat\s+ok\s+\d{4}-\d{2}-\d{2} ", status, re.MULTILINE), status
    assert _succeeded(tmp_path, "heartbeat") >= 1
    _sent_once(tmp_path)


def _tutorial_recorded(folder: Path) -> bool:
    ended = [state for state in _states_of_key(folder, "invoice.settled:7") if state != "running"]
    return _succeeded(folder, "settle-open-invoices") >= 1 and len(ended) == 2


def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    processes = Background(_tutorial_recorded)
    page = run_page(DOCS / "tutorial.md", tmp_path, services=processes)

    # The files it names, saved; the processes it starts, started; nothing left unrun
    # but the virtual environment and the PostgreSQL example, which say why.
    saved = [entry for entry in page.ran if entry.startswith("file ")]
    assert saved == ["file shop.py", "file seed.py", "file pay_twice.py"]
    assert processes.kinds() == ["worker", "beat", "web"]
    assert len(page.skipped) == 2, page.skipped

    # The scheduled job fired and settled every invoice; its runs were recorded.
    assert _succeeded(tmp_path, "settle-open-invoices") >= 1
    statuses = _rows(tmp_path, "SELECT status, count(*) FROM invoices GROUP BY status")
    assert statuses == [("settled", 10)]
    _sent_once(tmp_path)
    # The payment sent twice: one run settled it, the other was a duplicate.
    assert _states_of_key(tmp_path, "invoice.settled:7") == ["duplicate", "succeeded"]

    # What the reader was shown: the CLI and the console saw the same.
    runs = page.outputs["celery -A shop gaffer runs --limit 5"].stdout
    assert re.search(r"^settle-open-invoices .* succeeded ", runs, re.MULTILINE), runs
    status = page.outputs["celery -A shop gaffer status"].stdout
    assert re.search(r"^settle-open-invoices\s+ok\s", status, re.MULTILINE), status
    status_json = page.outputs["celery -A shop gaffer status --json"].stdout
    healths = {h["schedule"]: h["state"] for h in map(json.loads, status_json.splitlines())}
    assert healths == {"nightly-report": "ok", "settle-open-invoices": "ok"}
    alerts = page.outputs[f"curl -fsS http://{CONSOLE}/api/alerts"].stdout
    assert json.loads(alerts) == []
    detail = page.outputs[f"curl -fsS http://{CONSOLE}/api/schedules/settle-open-invoices"]
    assert json.loads(detail.stdout)["state"] == "ok"
