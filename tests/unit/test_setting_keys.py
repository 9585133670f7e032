"""Unknown ``gaffer_*`` keys: one warning per key and process, naming the closest key.

Each test uses keys of its own: the warning is given once per process, so a key warned
about in one test would be silent in the next.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from celery_gaffer.exceptions import GafferConfigWarning
from celery_gaffer.settings import SETTING_KEYS, GafferSettings, forget_settings, settings_for

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "celery_gaffer"

#: A valid value for every key (one of the two webhook keys only: not both).
VALID = {
    "gaffer_database_url": "sqlite:///never-opened.sqlite3",
    "gaffer_table_prefix": "shop_",
    "gaffer_lease_ttl": 30,
    "gaffer_republish_after": timedelta(seconds=20),
    "gaffer_max_catchup": 5,
    "gaffer_alert_after_failures": 2,
    "gaffer_default_grace": 10,
    "gaffer_metrics_port": 9101,
    "gaffer_web_token": "s3cret",
    "gaffer_confirm_delivery_after": 120,
    "gaffer_run_retention": 86400,
    "gaffer_ledger_retention": 86400,
    "gaffer_key_retention": 86400,
    "gaffer_partition_interval": 86400,
    "gaffer_run_arguments": False,
    "gaffer_alert_webhook_secret_url": "https://hooks.example/T0/B0/x",
    "gaffer_trace_url": "https://jaeger.example/trace/{trace_id}",
}


def _app(**conf: Any) -> Celery:
    app = Celery("setting-keys", set_as_current=False)
    app.conf.update(conf)
    return app


def _gaffer_warnings(app: Celery, reads: int = 1) -> list[warnings.WarningMessage]:
    """The GafferConfigWarnings of reading ``app``'s settings ``reads`` times afresh."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warning given reaches the list
        for _ in range(reads):
            forget_settings(app)
            settings_for(app)
    return [w for w in caught if issubclass(w.category, GafferConfigWarning)]


def test_a_mistyped_key_warns_once_naming_the_key_meant() -> None:
    app = _app(gaffer_lease_tll=30)
    (warning,) = _gaffer_warnings(app, reads=3) + _gaffer_warnings(_app(gaffer_lease_tll=5))
    assert str(warning.message) == (
        "unknown setting gaffer_lease_tll (did you mean gaffer_lease_ttl?)"
    )
    assert isinstance(warning.message, UserWarning)
    # Located in the configuration, one line: no source line of celery-gaffer's under it.
    assert warnings.formatwarning(
        warning.message, warning.category, warning.filename, warning.lineno, warning.line
    ) == (
        "app.conf:0: GafferConfigWarning: unknown setting gaffer_lease_tll "
        "(did you mean gaffer_lease_ttl?)\n"
    )
    assert settings_for(app).lease_ttl == 60.0  # the mistyped key is ignored


def test_each_unknown_key_warns_for_itself() -> None:
    app = _app(gaffer_max_catchpu=3, gaffer_run_retension=86400, gaffer_frobnicate=True)
    messages = sorted(str(w.message) for w in _gaffer_warnings(app))
    assert messages == [
        "unknown setting gaffer_frobnicate: celery-gaffer has no such setting",
        "unknown setting gaffer_max_catchpu (did you mean gaffer_max_catchup?)",
        "unknown setting gaffer_run_retension (did you mean gaffer_run_retention?)",
    ]


def test_a_key_like_none_is_reported_without_a_suggestion() -> None:
    (warning,) = _gaffer_warnings(_app(gaffer_x=1))
    assert str(warning.message) == "unknown setting gaffer_x: celery-gaffer has no such setting"
    assert "did you mean" not in str(warning.message)


def test_a_correct_configuration_warns_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", GafferConfigWarning)
        settings = settings_for(_app(**VALID, beat_schedule={}, timezone="Europe/Paris"))
    assert settings.table_prefix == "shop_"


def test_an_upper_case_key_celery_would_ignore_is_reported() -> None:
    (warning,) = _gaffer_warnings(_app(GAFFER_DEFAULT_GRACE=10))
    assert str(warning.message) == (
        "unknown setting GAFFER_DEFAULT_GRACE (did you mean gaffer_default_grace?)"
    )


class _Namespaced:
    CELERY_BROKER_URL = "memory://"
    CELERY_GAFFER_KEY_RETENTION = 86400
    CELERY_GAFFER_LEDGER_RETENTON = 86400
    SOME_OTHER_SETTING = True


def test_keys_under_celerys_namespace_are_checked_as_celery_reads_them() -> None:
    app = Celery("setting-keys-ns", set_as_current=False)
    app.config_from_object(_Namespaced, namespace="CELERY")
    (warning,) = _gaffer_warnings(app)
    assert str(warning.message) == (
        "unknown setting CELERY_GAFFER_LEDGER_RETENTON "
        "(did you mean CELERY_GAFFER_LEDGER_RETENTION?)"
    )
    assert settings_for(app).key_retention == 86400.0  # the known one is read


def test_a_correct_namespaced_configuration_warns_nothing() -> None:
    namespaced = type(
        "Config",
        (),
        {f"CELERY_{key.upper()}": value for key, value in VALID.items()},
    )
    app = Celery("setting-keys-ns-ok", set_as_current=False)
    app.config_from_object(namespaced, namespace="CELERY")
    with warnings.catch_warnings():
        warnings.simplefilter("error", GafferConfigWarning)
        assert settings_for(app).table_prefix == "shop_"


class _Recording(Mapping[str, Any]):
    """An empty configuration that records every key looked up in it."""

    def __init__(self) -> None:
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _read_by_settings() -> set[str]:
    conf = _Recording()
    GafferSettings.from_conf(conf)
    return conf.read


def _read_elsewhere() -> set[str]:
    """``gaffer_*`` keys read from an ``app.conf`` outside the settings module:
    ``x.conf.get("gaffer_...")``, ``x.conf["gaffer_..."]`` and ``x.conf.gaffer_...``."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and _is_conf(node.func.value)
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                found.add(str(node.args[0].value))
            elif isinstance(node, ast.Subscript) and _is_conf(node.value):
                if isinstance(node.slice, ast.Constant):
                    found.add(str(node.slice.value))
            elif isinstance(node, ast.Attribute) and _is_conf(node.value):
                found.add(node.attr)
    return {key for key in found if key.lower().startswith("gaffer_")}


def _is_conf(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "conf"


def test_every_key_the_settings_module_reads_is_in_the_table() -> None:
    read = _read_by_settings()
    assert read, "the recording configuration saw no key"
    assert read <= set(SETTING_KEYS), sorted(read - set(SETTING_KEYS))


def test_every_key_read_elsewhere_is_in_the_table_and_every_entry_is_read() -> None:
    elsewhere = _read_elsewhere()
    assert "gaffer_web_token" in elsewhere  # the scan finds the console's key
    assert elsewhere <= set(SETTING_KEYS), sorted(elsewhere - set(SETTING_KEYS))
    assert len(SETTING_KEYS) == len(set(SETTING_KEYS))
    assert _read_by_settings() | elsewhere == set(SETTING_KEYS)  # no entry nobody reads


def test_the_configuration_reference_documents_exactly_the_table() -> None:
    text = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    documented = re.findall(r"^\| `(gaffer_[a-z_]+)` \|", text, re.MULTILINE)
    assert sorted(documented) == sorted(SETTING_KEYS)


@pytest.mark.parametrize("key", SETTING_KEYS)
def test_no_known_key_is_ever_reported(key: str) -> None:
    conf = {key: VALID.get(key, "https://hooks.example/T0/B0/x")}
    with warnings.catch_warnings():
        warnings.simplefilter("error", GafferConfigWarning)
        GafferSettings.from_conf(conf)
