"""The CLI's tables: long cells are cut visibly, identifiers never."""

from __future__ import annotations

import pytest

from celery_gaffer.cli.base import table


def test_identifiers_stay_whole_and_other_long_cells_end_with_an_ellipsis(
    capsys: pytest.CaptureFixture[str],
) -> None:
    key = "billing.reconcile-invoices-nightly-for-every-tenant@2026-12-01T01:30:00Z"
    task = "billing.tasks." + "x" * 60
    table(("TASK", "KEY", "STATE"), [(task, key, "succeeded")])
    header, row = capsys.readouterr().out.splitlines()
    cells = row.split()
    assert cells[0] == task[:49] + "…"
    assert cells[1] == key
    assert cells[2] == "succeeded"
    assert header.index("KEY") == row.index(key)


def test_the_last_column_is_whole_when_wide(capsys: pytest.CaptureFixture[str]) -> None:
    reason = "the fire of 2026-12-01 02:30 GMT (02:30Z) has not succeeded " * 2
    table(("SCHEDULE", "REASON"), [("nightly", reason)], last_wide=True)
    assert capsys.readouterr().out.splitlines()[1].endswith(reason.rstrip())
