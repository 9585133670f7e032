"""The tests' claim on a Redis database, on the real server: a database holding anything
else is never claimed nor emptied, two runs never share one, and a run leaves its
database empty."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from .. import redis_claim
from ..redis_claim import OWNER_KEY, ClaimError, claim, empty
from ..services import REDIS_SERVER, service_missing

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def claims() -> Iterator[list[redis_claim.Claim]]:
    """Claims made by a test, released after it whatever happened."""
    made: list[redis_claim.Claim] = []
    try:
        with redis.Redis.from_url(REDIS_SERVER, socket_connect_timeout=3) as client:
            client.ping()
    except redis.RedisError as exc:
        service_missing("Redis", REDIS_SERVER, exc)
    yield made
    for held in made:
        held.release()


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


@pytest.fixture
def foreign(claims: list[redis_claim.Claim]) -> Iterator[str]:
    """A database holding one key of somebody else's (and no claim), deleted after."""
    held = claim(REDIS_SERVER)
    with _client(held.url) as client:
        client.set("someone:data", "precious")
        client.delete(OWNER_KEY)
    try:
        yield held.url
    finally:
        with _client(held.url) as client:
            client.delete("someone:data")


def _number(url: str) -> int:
    return int(url.rsplit("/", 1)[1])


def test_two_runs_claim_two_databases_each_holding_only_its_owner_key(
    claims: list[redis_claim.Claim],
) -> None:
    claims += [claim(REDIS_SERVER), claim(REDIS_SERVER)]
    first, second = claims
    assert first.url != second.url
    for held in claims:
        with _client(held.url) as client:
            assert client.keys("*") == [OWNER_KEY]
            assert client.get(OWNER_KEY) == held.owner
            assert 0 < client.ttl(OWNER_KEY) <= redis_claim.CLAIM_SECONDS


def test_a_database_holding_a_foreign_key_is_never_claimed_nor_emptied(foreign: str) -> None:
    with pytest.raises(ClaimError, match="no empty Redis database to claim"):
        claim(REDIS_SERVER, [_number(foreign)])
    with pytest.raises(ClaimError, match="not claimed by this run"):
        empty(foreign, "some-run")
    with _client(foreign) as client:
        assert client.keys("*") == ["someone:data"]


def test_emptying_keeps_the_claim_and_another_runs_claim_refuses_an_explicit_url(
    claims: list[redis_claim.Claim],
) -> None:
    held = claim(REDIS_SERVER)
    claims.append(held)
    with _client(held.url) as client:
        client.rpush("celery", "message")
        held.empty()
        assert client.keys("*") == [OWNER_KEY]
        client.rpush("celery", "message")
        # GAFFER_TEST_REDIS_URL naming a database another run claimed: left alone.
        with pytest.raises(ClaimError, match="claimed by another test run"):
            empty(held.url)
        assert sorted(client.keys("*")) == ["celery", OWNER_KEY]


def test_a_lost_claim_is_neither_refreshed_nor_emptied_nor_released(
    claims: list[redis_claim.Claim],
) -> None:
    held = claim(REDIS_SERVER)
    claims.append(held)
    assert held.refresh()
    with _client(held.url) as client:
        client.set(OWNER_KEY, "another-run")
        client.set("theirs", "1")
        assert not held.refresh()
        with pytest.raises(ClaimError):
            held.empty()
        held.release()
        assert sorted(client.keys("*")) == [OWNER_KEY, "theirs"]
        client.delete(OWNER_KEY, "theirs")


def test_a_test_run_claims_an_empty_database_and_leaves_it_empty(
    foreign: str, claims: list[redis_claim.Claim], tmp_path: Path
) -> None:
    """A whole pytest run without GAFFER_TEST_REDIS_URL, while this run holds a claim and
    another database holds somebody's data: it uses neither, and leaves nothing behind."""
    claims.append(claim(REDIS_SERVER))
    used = tmp_path / "used"
    probe = ROOT / "tests" / "integration" / f"test_zz_claim_probe_{os.getpid()}.py"
    probe.write_text(
        "import redis\n"
        "def test_probe(redis_url):\n"
        f"    open({str(used)!r}, 'w').write(redis_url)\n"
        "    redis.Redis.from_url(redis_url).set('written-by-the-probe', '1')\n"
    )
    env = {
        k: v for k, v in os.environ.items() if k not in {"GAFFER_TEST_REDIS_URL", "PYTEST_ADDOPTS"}
    }
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(probe)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        probe.unlink()
    assert result.returncode == 0, result.stdout + result.stderr
    url = used.read_text()
    assert url not in {foreign, claims[0].url}
    with _client(url) as client:
        assert client.dbsize() == 0
    with _client(foreign) as client:
        assert client.keys("*") == ["someone:data"]
