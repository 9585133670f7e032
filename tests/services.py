"""Where the test services live, and what a missing one does to a test.

Under ``CI=true`` a test that needs PostgreSQL, Redis or RabbitMQ fails when the service does not
answer, with a message naming it; elsewhere it is skipped with one line saying why.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

from celery_gaffer.settings import mask_url

IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes", "on"}

# The server's maintenance database; each test run creates databases of its own beside it.
POSTGRES_URL = os.environ.get(
    "GAFFER_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
# A Redis database named here is the tests' to empty; without one, each run claims an empty
# database of this server's for itself (tests/redis_claim.py).
REDIS_URL = os.environ.get("GAFFER_TEST_REDIS_URL", "")
REDIS_SERVER = "redis://127.0.0.1:6379"
AMQP_URL = os.environ.get("GAFFER_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")


def service_missing(service: str, url: str, error: BaseException) -> NoReturn:
    """Fail (CI) or skip (elsewhere) the current test because ``service`` is unreachable."""
    message = f"{service} is unreachable at {mask_url(url)}: {type(error).__name__}: {error}"
    if IN_CI:
        pytest.fail(f"{message} (CI=true requires {service})", pytrace=False)
    pytest.skip(message)
