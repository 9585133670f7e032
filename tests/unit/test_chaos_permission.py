"""The chaos suite restarts this machine's PostgreSQL and Redis only when asked to."""

from __future__ import annotations

import pytest

from ..chaos.run import (
    FAULTS,
    RESTART_PERMISSION,
    RestartsNotAllowed,
    check_permission,
    main,
)


def test_restart_faults_are_refused_without_the_permission_naming_how_to_ask(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(RESTART_PERMISSION, raising=False)
    with pytest.raises(RestartsNotAllowed) as refused:
        check_permission(FAULTS)
    assert str(refused.value) == (
        "the chaos faults crash_postgres, restart_postgres, restart_redis restart this "
        "machine's PostgreSQL and Redis (Redis without saving); set "
        "GAFFER_CHAOS_RESTART_SERVICES=1 to allow it (CI does)"
    )


@pytest.mark.parametrize("value", ["", "0", "no"])
def test_faults_on_the_suites_own_processes_need_no_permission(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(RESTART_PERMISSION, value)
    check_permission(("pause_beat", "pause_worker", "kill_worker", "kill_beat", "pause_holder"))
    with pytest.raises(RestartsNotAllowed):
        check_permission(("pause_beat", "restart_redis"))


def test_the_permission_allows_every_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RESTART_PERMISSION, "1")
    check_permission(FAULTS)


def test_the_long_form_refuses_in_one_line_before_touching_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(RESTART_PERMISSION, raising=False)
    # An unreachable database: a run that went past the check would fail on it.
    code = main(["--seconds", "1", "--database", "postgresql+psycopg://nobody@127.0.0.1:1/x"])
    assert code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("chaos: the chaos faults crash_postgres, restart_postgres")
