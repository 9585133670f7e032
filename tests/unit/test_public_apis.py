"""The package uses its dependencies through their public APIs only (see tests/public_apis.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..public_apis import check


def test_the_package_uses_no_private_api_of_its_dependencies() -> None:
    findings = check()
    assert not findings, "\n".join(str(finding) for finding in findings)


def _package(tmp_path: Path, source: str) -> Path:
    root = tmp_path / "celery_gaffer"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "module.py").write_text(source)
    return root


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("from psycopg._preparing import Prepare\n", "private module psycopg._preparing"),
        ("from psycopg import generators\n", "private generators"),
        ("import sqlalchemy.engine._row_cy\n", "private module sqlalchemy.engine._row_cy"),
        ("def f(conn):\n    conn._handle_dbapi_exception(1)\n", "_handle_dbapi_exception"),
        ("def f(conn):\n    return hasattr(conn, '_handle_dbapi_exception')\n", "hasattr"),
        ("def f(driver):\n    return getattr(driver, '_prepared', None)\n", "getattr"),
        ("def f(d, c):\n    vars(d).update(do_commit=c)\n", "vars(...).update"),
        ("def f(d, c):\n    setattr(d, 'do_commit', c)\n", "setattr"),
        ("import psycopg\n\n\ndef f():\n    psycopg.connect = None\n", "module psycopg"),
        ("def f(sim, state):\n    sim.__dict__.update(state)\n", "__dict__"),
        (
            "import importlib\n\n\ndef f():\n    importlib.import_module('psycopg._preparing')\n",
            "private module psycopg._preparing",
        ),
    ],
)
def test_each_kind_of_private_use_is_found(tmp_path: Path, source: str, what: str) -> None:
    (finding,) = check(_package(tmp_path, source))
    assert what in finding.what
    assert finding.path == "celery_gaffer/module.py"


def test_the_package_own_names_and_documented_underscore_names_pass(tmp_path: Path) -> None:
    source = (
        "ATTRIBUTE = 'gaffer_delivery'\n\n\n"
        "class Box:\n"
        "    __slots__ = ('_value',)\n\n"
        "    def __init__(self):\n"
        "        self._value = 1\n\n"
        "    def _helper(self):\n"
        "        return self._value\n\n\n"
        "def f(box, row, request):\n"
        "    setattr(request, ATTRIBUTE, box)\n"
        "    return box._helper(), row._mapping\n"
    )
    assert check(_package(tmp_path, source)) == []
