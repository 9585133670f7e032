"""``printable_text``'s ``str.isprintable`` fast path decides exactly as the scan does."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from celery_gaffer import InvalidInput
from celery_gaffer.schedules.spec import printable_text

FORBIDDEN = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def scanned(value: str) -> str | None:
    """The rule itself: the first character of a forbidden category, if any."""
    return next((c for c in value if unicodedata.category(c) in FORBIDDEN), None)


def check(value: str) -> None:
    bad = scanned(value)
    if bad is None:
        assert printable_text(value, "name") is value
    else:
        with pytest.raises(InvalidInput) as caught:
            printable_text(value, "name")
        assert str(caught.value) == f"name: must not contain the character U+{ord(bad):04X}"
        assert caught.value.field == "name"


@given(st.text(alphabet=st.characters(codec=None, exclude_categories=())))
def test_any_text_is_judged_as_the_scan_judges_it(value: str) -> None:
    check(value)


@given(st.text(alphabet=st.characters(categories=("Zs", "Co", "Cn", "Cf", "Zl", "L"))))
def test_non_printable_but_allowed_characters_take_the_scan(value: str) -> None:
    # Spaces other than " ", private-use and unassigned characters are not printable but
    # allowed: the fast path must not refuse them.
    check(value)


@pytest.mark.parametrize(
    "value",
    ["tenant-1", "a\u00a0b", "\ue000", "\U000e01ef", "x\x00", "a\u2028", "\u200b", "\ud800", ""],
)
def test_examples(value: str) -> None:
    check(value)
