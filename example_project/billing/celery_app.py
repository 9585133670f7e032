"""The Celery app: embedded default (SQLite + kombu's filesystem transport), or servers.

Environment:

* ``GAFFER_DATABASE_URL`` (default: ``sqlite:///var/gaffer.sqlite3`` in this folder)
* ``CELERY_BROKER_URL`` (default: kombu's filesystem transport under ``var/broker``)
* ``BILLING_DEMO=1`` compresses the schedules so that a minute shows several fires.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from celery import Celery

import celery_gaffer
from celery_gaffer import cron, every

HERE = Path(__file__).resolve().parent.parent
VAR = Path(os.environ.get("BILLING_VAR", HERE / "var"))
BROKER_DIR = VAR / "broker"

app = Celery("billing", include=["billing.tasks"])
app.conf.gaffer_database_url = os.environ.get(
    "GAFFER_DATABASE_URL", f"sqlite:///{VAR / 'gaffer.sqlite3'}"
)
broker_url = os.environ.get("CELERY_BROKER_URL")
if broker_url:
    app.conf.broker_url = broker_url
else:
    app.conf.broker_url = "filesystem://"
    app.conf.broker_transport_options = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "control_folder": str(BROKER_DIR / "control"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "store_processed": False,
    }
app.conf.task_serializer = "json"
app.conf.accept_content = ["json"]
app.conf.worker_send_task_events = True  # Flower shows runs and batch PROGRESS
app.conf.broker_connection_retry_on_startup = True
app.conf.gaffer_lease_ttl = 30


def _soon_in(zone: str) -> str:
    """A daily cron expression for the next whole minute in ``zone`` (demo only)."""
    moment = datetime.now(ZoneInfo(zone)) + timedelta(minutes=1)
    return f"{moment.minute} {moment.hour} * * *"


if os.environ.get("BILLING_DEMO"):
    app.conf.beat_schedule = {
        "nightly-reconciliation": {
            "task": "billing.tasks.reconcile",
            "schedule": every(10),
            "gaffer": {"catchup": "latest", "overlap": "forbid"},
        },
        "overdue-reminders": {"task": "billing.tasks.remind_overdue", "schedule": every(7)},
        "hourly-report": {
            "task": "billing.tasks.hourly_report",
            "schedule": cron("* * * * *", "Europe/London"),
        },
        "new-york-digest": {
            "task": "billing.tasks.morning_digest",
            "schedule": cron(_soon_in("America/New_York"), "America/New_York"),
        },
    }
else:
    app.conf.beat_schedule = {
        "nightly-reconciliation": {
            "task": "billing.tasks.reconcile",
            "schedule": cron("30 2 * * *", "Europe/London"),
            "gaffer": {"catchup": "latest", "overlap": "forbid", "grace": 3600},
        },
        "overdue-reminders": {
            "task": "billing.tasks.remind_overdue",
            "schedule": cron("0 8 * * 1-5", "Europe/London"),
        },
        "hourly-report": {
            "task": "billing.tasks.hourly_report",
            "schedule": cron("0 * * * *", "Europe/London"),
        },
        "new-york-digest": {
            "task": "billing.tasks.morning_digest",
            "schedule": cron("0 9 * * *", "America/New_York"),
        },
    }

celery_gaffer.install(app)
