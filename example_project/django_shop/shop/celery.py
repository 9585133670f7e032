"""The Celery app of the shop: the standard Celery + Django layout, plus Gaffer.

Worker: ``celery -A shop worker``; Beat: ``celery -A shop beat -S gaffer``.
"""

import os

from celery import Celery

import celery_gaffer

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")

app = Celery("shop")
# Every CELERY_* setting of settings.py: CELERY_BROKER_URL -> broker_url,
# CELERY_GAFFER_DATABASE_URL -> gaffer_database_url, CELERY_BEAT_SCHEDULE -> beat_schedule.
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
celery_gaffer.install(app)  # run records; nothing else is wired at import time
