"""A small billing project showing celery-gaffer end to end."""
