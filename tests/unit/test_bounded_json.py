"""One JSON decoder for every text from outside, bounded in depth; codecs checked against
kombu's registries when an entry is validated."""

from __future__ import annotations

from typing import Any

import pytest

from celery_gaffer import InvalidInput, every
from celery_gaffer.protocol import MAX_JSON_DEPTH, json_depth, loads_json
from celery_gaffer.schedules.codecs import codec_problem
from celery_gaffer.schedules.spec import validate_entry


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_a_value_nested_to_the_limit_decodes() -> None:
    value = loads_json(nested(MAX_JSON_DEPTH), "args")
    assert json_depth(value) == MAX_JSON_DEPTH


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 1_000, 100_000])
def test_a_deeper_value_is_refused_in_one_line_naming_the_field(depth: int) -> None:
    with pytest.raises(InvalidInput) as refused:
        loads_json(nested(depth), "args")
    assert str(refused.value) == "args: JSON nested deeper than 64 levels"
    assert refused.value.field == "args"
    assert refused.value.__cause__ is None  # no RecursionError chained to print


def test_bytes_are_decoded_with_the_same_bound() -> None:
    assert loads_json(b'{"a": [1]}', "body") == {"a": [1]}
    with pytest.raises(InvalidInput, match="body: JSON nested deeper"):
        loads_json(nested(100_000).encode(), "body")


def test_many_shallow_brackets_are_not_mistaken_for_depth() -> None:
    text = "[" + ",".join(["[1]"] * 1_000) + "]"
    assert len(loads_json(text, "args")) == 1_000


@pytest.mark.parametrize(
    ("text", "reason"),
    [("{", "not valid JSON"), (b"\xff", "not valid JSON"), ("[1,]", "not valid JSON")],
)
def test_text_that_is_not_json_is_refused_naming_the_field(text: Any, reason: str) -> None:
    with pytest.raises(InvalidInput, match=f"^kwargs: {reason}") as refused:
        loads_json(text, "kwargs")
    assert refused.value.field == "kwargs"


def test_json_depth_counts_lists_and_dicts_without_recursion() -> None:
    value: Any = 1
    for _ in range(50_000):
        value = {"a": [value]}
    assert json_depth(value) == 100_000
    assert json_depth("text") == 0
    assert json_depth({"a": 1, "b": [2, [3]]}) == 3


def test_an_entry_from_code_nested_too_deeply_is_refused_naming_the_field() -> None:
    value: Any = []
    for _ in range(100):
        value = [value]
    with pytest.raises(InvalidInput) as refused:
        validate_entry(name="x", task="t", schedule=every(60), kwargs={"deep": value})
    assert refused.value.field == "kwargs"


@pytest.mark.parametrize("name", ["gzip", "zlib", "bzip2", "lzma"])
def test_compressions_kombu_knows_are_accepted(name: str) -> None:
    assert codec_problem("compression", name) is None
    spec = validate_entry(name="x", task="t", schedule=every(60), options={"compression": name})
    assert spec.options == {"compression": name}


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("compression", "bogus", "'bogus' is not a compression kombu knows here (known: gzip"),
        ("compression", "x-zip", "expected a codec name"),
        ("compression", 7, "expected a codec name"),
        ("serializer", "pickle", "only json (never pickle)"),
        ("serializer", "yaml", "only json (never pickle)"),
    ],
)
def test_unknown_codecs_are_refused_naming_the_option(option: str, value: Any, says: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        validate_entry(name="x", task="t", schedule=every(60), options={option: value})
    assert refused.value.field == f"options.{option}"
    assert says in str(refused.value)
