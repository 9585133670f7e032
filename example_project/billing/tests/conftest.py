"""The billing app under celery-gaffer's ``gaffer_beat`` fixture (its pytest plugin):
Beat rehearsed on a virtual clock, on a SQLite file of the test session and an
in-memory broker. Run from example_project/: ``python -m pytest billing/tests``."""

import pytest
from billing.celery_app import app


@pytest.fixture
def gaffer_app():
    return app
