"""The Django app of celery-gaffer: add ``"celery_gaffer.contrib.django"`` to ``INSTALLED_APPS``."""
