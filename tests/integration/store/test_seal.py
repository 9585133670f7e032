"""The seal of a fenced commit on real PostgreSQL: the migration's function, its refusals
as Gaffer errors, and the seal sent with the COMMIT."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from celery_gaffer import AlreadyProcessed, FenceLost
from celery_gaffer.settings import parse_database_url
from celery_gaffer.store import get_engine, migrate
from celery_gaffer.store.keys import key_state
from celery_gaffer.store.models import models_for
from celery_gaffer.store.seal import seal

SIGNATURE = "varchar[], bigint[], varchar[], varchar, varchar, bigint, boolean"


def _function_exists(conn: object, name: str) -> bool:
    found = conn.execute(  # type: ignore[attr-defined]
        text("SELECT to_regprocedure(:signature) IS NOT NULL"),
        {"signature": f"{name}({SIGNATURE})"},
    )
    return bool(found.scalar())


@pytest.mark.parametrize("prefix", ["gaffer_", "jobs_"])
def test_migration_0005_makes_the_seal_function_of_its_prefix_and_takes_it_back(
    empty_postgres_url: str, prefix: str
) -> None:
    engine = get_engine(parse_database_url(empty_postgres_url))
    migrate(engine, prefix, "0004")
    with engine.connect() as conn:
        assert not _function_exists(conn, f"{prefix}seal")
    assert migrate(engine, prefix, "0005") == ("0004", "0005")
    with engine.connect() as conn:
        assert _function_exists(conn, f"{prefix}seal")
    assert migrate(engine, prefix, "0004") == ("0005", "0004")
    with engine.connect() as conn:
        assert not _function_exists(conn, f"{prefix}seal")


def _lease(conn: object, name: str, fence: int, owner: str) -> None:
    conn.execute(  # type: ignore[attr-defined]
        text(
            "INSERT INTO gaffer_leases (name, owner, fence, lease_until) "
            "VALUES (:name, :owner, :fence, now() + interval '1 minute')"
        ),
        {"name": name, "owner": owner, "fence": fence},
    )


@pytest.mark.parametrize("commit", [False, True], ids=["statement", "with-the-commit"])
def test_the_seal_checks_every_lease_and_claims_the_key_or_refuses_with_a_gaffer_error(
    empty_postgres_url: str, commit: bool
) -> None:
    engine = get_engine(parse_database_url(empty_postgres_url))
    migrate(engine, "gaffer_")
    models = models_for("gaffer_")
    with engine.begin() as conn:
        _lease(conn, "a", 3, "me")
        _lease(conn, "b", 7, "me")
        conn.execute(text("CREATE TABLE effects (label text)"))

    def sealed(held: list[tuple[str, int, str]], key: str | None, label: str) -> None:
        with engine.connect() as conn:
            conn.execute(text("INSERT INTO effects VALUES (:label)"), {"label": label})
            seal(conn, models, held, key, "task", 7, complete=True, commit=commit)
            conn.commit()

    sealed([("a", 3, "me"), ("b", 7, "me")], "k1", "both current")
    with pytest.raises(FenceLost, match=r"lease 'b': fence 6 is no longer current"):
        sealed([("a", 3, "me"), ("b", 6, "me")], "k2", "b stale")
    with pytest.raises(FenceLost, match=r"lease 'a'"):
        sealed([("a", 3, "someone else")], None, "a not mine")
    with pytest.raises(AlreadyProcessed, match=r"key 'k1' was already completed"):
        sealed([("a", 3, "me")], "k1", "k1 again")
    sealed([], None, "nothing to check")

    with engine.connect() as conn:
        labels = conn.execute(text("SELECT label FROM effects ORDER BY label")).scalars().all()
        assert labels == ["both current", "nothing to check"]
        assert key_state(conn, models, "k1") == "completed"
        assert key_state(conn, models, "k2") is None
        fence = conn.execute(text("SELECT fence FROM gaffer_keys WHERE key = 'k1'")).scalar()
        assert fence == 7
    engine.dispose()
