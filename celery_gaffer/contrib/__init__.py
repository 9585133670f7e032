"""Integrations with other frameworks: ``celery_gaffer.contrib.django``."""
