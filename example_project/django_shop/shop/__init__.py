"""The shop's Django project. Importing it loads the Celery app, as Celery's Django guide
sets up, so that ``@shared_task`` and ``python manage.py gaffer`` find it."""

from .celery import app as celery_app

__all__ = ("celery_app",)
