"""The Celery app of the Django tests (``GAFFER_CELERY_APP``)."""

from __future__ import annotations

from celery import Celery

from ...services import REDIS_URL

app = Celery("gaffer-django-tests", broker=REDIS_URL or None, set_as_current=False)
app.conf.gaffer_database_url = "django://default"


@app.task(name="t.report", shared=False)
def report() -> None:
    return None
