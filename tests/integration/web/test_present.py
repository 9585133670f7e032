"""The console's wording and input reading (pure; here because it needs the web extra)."""

from __future__ import annotations

import pytest

from celery_gaffer import cron, every
from celery_gaffer.exceptions import InvalidInput
from celery_gaffer.web.actions import edit_changes
from celery_gaffer.web.present import in_words


@pytest.mark.parametrize(
    ("schedule", "words"),
    [
        (cron("30 1 * * *", "Europe/London"), "daily at 01:30"),
        (cron("0 9 * * 1-5"), "on weekdays at 09:00"),
        (cron("*/5 * * * *"), "every 5 minutes"),
        (cron("15 * * * *"), "hourly at :15"),
        (cron("* * * * *"), "every minute"),
        (cron("0 9 1 * *"), ""),
        (every(60), "every minute"),
        (every(7200), "every 2 hours"),
        (every(90), "every 90 seconds"),
        (None, ""),
    ],
)
def test_common_schedules_read_in_words(schedule: object, words: str) -> None:
    assert in_words(schedule) == words  # type: ignore[arg-type]


def test_an_edit_form_keeps_empty_fields_and_reads_numbers_and_json() -> None:
    form = {"cron": "", "every": "300", "kwargs": '{"a": 1}', "grace": " 60 ", "catchup": ""}
    assert edit_changes(form, from_form=True) == {
        "every": 300.0,
        "kwargs": {"a": 1},
        "gaffer": {"grace": 60.0},
    }


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"every": "often"}, "every"),
        ({"grace": "nan"}, "grace"),
        ({"args": "[1,"}, "args"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_a_bad_edit_field_is_named(form: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        edit_changes(form, from_form=True)
    assert raised.value.field == field
    assert str(raised.value).startswith(field)


def test_an_edit_with_nothing_to_change_is_refused() -> None:
    with pytest.raises(InvalidInput, match="nothing to change"):
        edit_changes({"cron": " "}, from_form=True)
