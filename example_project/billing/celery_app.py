"""The Celery app: embedded default (SQLite + kombu's filesystem transport), or servers.

Environment:

* ``GAFFER_DATABASE_URL`` (default: ``sqlite:///var/gaffer.sqlite3`` in this folder)
* ``CELERY_BROKER_URL`` (default: kombu's filesystem transport under ``var/broker``)
* ``BILLING_DEMO=1``: the schedules of ``make demo`` (``demo.py``), which fire every few seconds.
* ``BILLING_VAR``: the folder of the SQLite file, the broker and the outbox (default ``var``).
"""

from __future__ import annotations

import os
from pathlib import Path

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
    # kombu's filesystem transport, each message written whole before a worker sees it.
    app.conf.broker_transport = "billing.broker:Transport"
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


# 01:30 in London: the hour that the clocks skip in March and repeat in October.
NIGHTLY_RECONCILIATION = {
    "task": "billing.tasks.reconcile",
    "schedule": cron("30 1 * * *", "Europe/London"),
    "gaffer": {"catchup": "latest", "overlap": "forbid", "grace": 3600},
}

if os.environ.get("BILLING_DEMO"):
    # What `make demo` shows in a minute: a fire every second for two Beats to share, an
    # export whose queue has no worker until the demo starts one, and the nightly job
    # (triggered by hand) whose London schedule `gaffer explain` walks across DST.
    app.conf.beat_schedule = {
        "nightly-reconciliation": NIGHTLY_RECONCILIATION,
        "bank-feed": {"task": "billing.tasks.import_bank_feed", "schedule": every(1)},
        "accounting-export": {
            "task": "billing.tasks.export_to_accounting",
            "schedule": every(5),
            "options": {"queue": "accounting"},
            "gaffer": {"grace": 3},
        },
    }
else:
    app.conf.beat_schedule = {
        "nightly-reconciliation": NIGHTLY_RECONCILIATION,
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
        "accounting-export": {
            "task": "billing.tasks.export_to_accounting",
            "schedule": cron("0 6 * * *", "Europe/London"),
            "options": {"queue": "accounting"},
            "gaffer": {"grace": 1800},
        },
    }

celery_gaffer.install(app)
