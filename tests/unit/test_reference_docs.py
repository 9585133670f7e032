"""The reference pages say what the code has, and fail the build when the code grows.

* ``docs/reference/cli.md``: its option tables are generated from the ``celery gaffer``
  click group (regenerate them with ``.venv/bin/python tests/unit/test_reference_docs.py``);
  every command has a line in the summary table.
* ``docs/reference/api.md``: every callable in its tables shows every parameter, every
  class every public member, every enum every value; the generated part renders each
  public name once, no private helper, and docstrings without Sphinx markup.
* ``docs/reference/configuration.md``: every ``gaffer_*`` key with its default, and every
  per-schedule ``gaffer={...}`` option with its default.
* No page of ``docs/`` and no line of ``benchmarks/README.md`` cites a session or an
  issue number.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"

# -- the command line -----------------------------------------------------------------

CLI_BEGIN = (
    "<!-- generated: the options of every command; see tests/unit/test_reference_docs.py -->"
)
CLI_END = "<!-- end of the generated options -->"


def _commands() -> Iterator[tuple[str, click.Command]]:
    """Every ``celery gaffer`` command, by its full name (``import redbeat``)."""
    from celery_gaffer.cli import gaffer

    def walk(group: click.Group, prefix: str) -> Iterator[tuple[str, click.Command]]:
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None, name
            if isinstance(command, click.Group):
                yield from walk(command, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", command

    yield from walk(gaffer, "")


def _markdown(text: str) -> str:
    """Help text as one line of a Markdown table cell."""
    text = " ".join(text.split())
    return text.replace("|", "\\|").replace("*", "\\*").replace("<", "&lt;")


def _default(option: click.Option) -> str:
    if option.required:
        return "required"
    if option.is_flag:
        return "off"
    value = option.default
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return ""  # None, or click's marker for "not given"
    if isinstance(value, float):
        value = f"{value:g}"
    return f"`{value}`"


def _meaning(option: click.Option) -> str:
    meaning = _markdown(option.help or "")
    if isinstance(option.type, click.Choice):
        words = ", ".join(f"`{choice}`" for choice in option.type.choices)
        meaning = f"{meaning} One of {words}.".strip()
    return meaning


def render_cli_options() -> str:
    """The generated part of cli.md: each command, its arguments and a table of its options."""
    parts = [CLI_BEGIN, ""]
    for name, command in _commands():
        arguments = " ".join(
            param.human_readable_name.upper()
            if param.required
            else f"[{param.human_readable_name.upper()}]"
            for param in command.params
            if isinstance(param, click.Argument)
        )
        parts.append(f"### `{name}{' ' + arguments if arguments else ''}`")
        parts.append("")
        parts.append(_markdown((command.help or "").split("\n\n")[0]))
        parts.append("")
        options = [param for param in command.params if isinstance(param, click.Option)]
        if options:
            parts.append("| option | default | meaning |")
            parts.append("|---|---|---|")
            for option in options:
                flags = ", ".join(f"`{flag}`" for flag in option.opts + option.secondary_opts)
                parts.append(f"| {flags} | {_default(option)} | {_meaning(option)} |")
        else:
            parts.append("No options.")
        parts.append("")
    parts.append(CLI_END)
    return "\n".join(parts)


def _generated_block(text: str) -> str:
    assert CLI_BEGIN in text, "cli.md lost the marker where its generated options begin"
    assert CLI_END in text, "cli.md lost the marker where its generated options end"
    start = text.index(CLI_BEGIN)
    return text[start : text.index(CLI_END, start) + len(CLI_END)]


def write_cli_options() -> None:
    path = REFERENCE / "cli.md"
    text = path.read_text()
    path.write_text(text.replace(_generated_block(text), render_cli_options()))


def test_the_cli_reference_has_every_command_and_option_as_the_code_says() -> None:
    text = (REFERENCE / "cli.md").read_text()
    assert _generated_block(text) == render_cli_options(), (
        "docs/reference/cli.md's option tables differ from the commands: run "
        "`.venv/bin/python tests/unit/test_reference_docs.py` and review the change"
    )


def test_every_command_has_a_line_in_the_summary_table() -> None:
    text = (REFERENCE / "cli.md").read_text()
    rows = [line for line in text.split(CLI_BEGIN)[0].splitlines() if line.startswith("| `")]
    for name, command in _commands():
        assert any(re.search(rf"`{re.escape(name)}[ `]", row) for row in rows), (
            f"cli.md's summary table has no line for `{name}`"
        )
        row = next(row for row in rows if re.search(rf"`{re.escape(name)}[ `]", row))
        for option in command.params:
            if isinstance(option, click.Option):
                flag = option.opts[0]
                assert flag in row, f"cli.md's summary line for `{name}` does not show {flag}"


def test_the_generated_options_check_catches_a_new_option() -> None:
    from celery_gaffer.cli import gaffer

    command = gaffer.get_command(click.Context(gaffer), "trigger")
    assert command is not None
    command.params.append(click.Option(["--brand-new"], help="Added by this test."))
    try:
        assert "`--brand-new`" in render_cli_options()
        assert _generated_block((REFERENCE / "cli.md").read_text()) != render_cli_options()
    finally:
        command.params.pop()


# -- the Python API -------------------------------------------------------------------


def _api_text() -> str:
    return (REFERENCE / "api.md").read_text()


def _table_rows() -> Iterator[tuple[str, str, str]]:
    """``(heading, first cell, whole row)`` of every table above the generated part."""
    heading = ""
    for line in _api_text().split("## Generated reference")[0].splitlines():
        if line.startswith("## "):
            heading = line.strip()
        elif line.startswith("| `"):
            yield heading, line.split("|")[1].strip(), line


def _resolve(path: str) -> Any:
    """``a.b.C.d`` imported: the longest importable module, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute)
        return obj
    raise AssertionError(f"cannot import {path}")


def _row_object(heading: str, name: str) -> Any:
    import celery_gaffer
    from celery_gaffer import GafferTask, ScheduleStore

    if heading == "## `celery_gaffer`":
        return getattr(celery_gaffer, name)
    if heading == "## `GafferTask` members":
        return getattr(GafferTask, name.removeprefix("self."))
    if heading == "## `ScheduleStore(app)` methods":
        return getattr(ScheduleStore, name.removeprefix("store."))
    return _resolve(name)


def _api_rows() -> Iterator[tuple[str, Any]]:
    """Each table row's text and the object its first cell names."""
    for heading, cell, row in _table_rows():
        name = re.match(r"`([^`(]+)", cell)
        assert name, row
        if heading.startswith(("## Signals", "## Exceptions")):
            continue  # listed by name; the exceptions' and signals' own tests cover them
        yield row, _row_object(heading, name.group(1))


def _parameters(obj: Any) -> list[str]:
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # pragma: no cover - a builtin without a signature
        return []
    skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [
        name
        for name, parameter in signature.parameters.items()
        if name not in ("self", "cls") and parameter.kind not in skip
    ]


def test_every_callable_in_the_api_tables_shows_all_its_parameters() -> None:
    for row, obj in _api_rows():
        first_cell = row.split("|")[1]
        is_function = inspect.isfunction(obj) or inspect.ismethod(obj)
        if is_function:
            assert "(" in first_cell, f"show the signature of {first_cell.strip()}"
        if "(" not in first_cell:
            continue
        for parameter in _parameters(obj):
            assert re.search(rf"\b{parameter}\b", first_cell), (
                f"api.md: {first_cell.strip()} does not show the parameter {parameter!r}"
            )


def _schedule_base_names() -> set[str]:
    from celery.schedules import BaseSchedule

    return set(dir(BaseSchedule))


def _public_members(cls: type) -> set[str]:
    """What a user reads on ``cls``: its own and its package's bases' public names; not
    Celery's schedule interface, ``Task``'s or ``object``'s."""
    if issubclass(cls, enum.Enum):
        return {str(member.value) for member in cls}
    names = {name for name in dir(cls) if not name.startswith("_")}
    if dataclasses.is_dataclass(cls):
        names |= {field.name for field in dataclasses.fields(cls)}
    for base in cls.__mro__:
        if not base.__module__.startswith("celery_gaffer"):
            names -= set(dir(base))
    names -= _schedule_base_names() - {"next_after"}  # Celery's contract, not Gaffer's API
    if issubclass(cls, BaseException):
        return set()  # the exceptions' table says what each means
    return names


def test_every_class_in_the_api_tables_lists_its_public_members() -> None:
    from celery_gaffer import GafferTask, Scheduler, ScheduleStore

    covered_elsewhere = (GafferTask, ScheduleStore, Scheduler)  # their own tables, or Celery's
    for row, obj in _api_rows():
        if not inspect.isclass(obj) or obj in covered_elsewhere:
            continue
        for member in sorted(_public_members(obj)):
            assert re.search(rf"`[^`]*\b{member}\b", row), (
                f"api.md: the line of {obj.__qualname__} does not list {member!r}"
            )


DIRECTIVE = re.compile(r"^::: (\S+)\n((?:    .*\n)*)", re.MULTILINE)


def _directives() -> list[tuple[str, list[str] | None]]:
    """``(path, members)`` of each ``:::`` directive of api.md (members None: not given)."""
    found = []
    for path, options in DIRECTIVE.findall(_api_text()):
        members = re.search(r"members: \[([^\]]*)\]", options)
        listed = None
        if members:
            listed = [m.strip() for m in members.group(1).split(",") if m.strip()]
        found.append((path, listed))
    return found


def _rendered() -> list[tuple[str, Any, list[Any]]]:
    """Every entry of the generated reference: its path, its object, and the objects
    whose docstrings it shows (its own and its listed members')."""
    rendered = []
    for path, members in _directives():
        obj = _resolve(path)
        shown = [obj]
        if inspect.ismodule(obj) or (inspect.isclass(obj) and not issubclass(obj, Exception)):
            assert members is not None, f"::: {path} must list its members (none private)"
        for member in members or []:
            assert not member.startswith("_"), f"::: {path} renders {member}"
            assert hasattr(obj, member), f"::: {path}: no member {member}"
            value = inspect.getattr_static(obj, member) if inspect.isclass(obj) else None
            shown.append(value.fget if isinstance(value, property) else getattr(obj, member))
        if inspect.ismodule(obj):  # each listed member is an entry of its own
            rendered += [(f"{path}.{m}", getattr(obj, m), []) for m in members or []]
            rendered.append((path, obj, [obj]))
        else:
            rendered.append((path, obj, shown))
    return rendered


def test_the_generated_reference_renders_each_public_name_once_and_no_helper() -> None:
    entries = [(path, obj) for path, obj, _ in _rendered() if not inspect.ismodule(obj)]
    short = [path.rsplit(".", 1)[-1] for path, _ in entries]
    twice = sorted({name for name in short if short.count(name) > 1})
    assert not twice, f"api.md renders two objects named {twice}"
    for path, _obj in entries:
        assert not any(part.startswith("_") for part in path.split(".")), path
    # Every name of the tables is rendered.
    import celery_gaffer

    expected = set(celery_gaffer.__all__) - {"__version__"}
    for _row, obj in _api_rows():
        named = inspect.isclass(obj) or inspect.isfunction(obj)
        if named and obj.__module__.startswith("celery_gaffer") and "." not in obj.__qualname__:
            expected.add(obj.__name__)
    missing = expected - set(short)
    assert not missing, f"api.md's generated part does not render {sorted(missing)}"


SPHINX_MARKUP = re.compile(r":(class|meth|func|mod|attr|data|exc|obj):`|^\s*\.\. [\w-]+::", re.M)


def test_the_rendered_docstrings_are_markdown() -> None:
    checked = 0
    for path, _obj, shown in _rendered():
        for item in shown:
            doc = getattr(item, "__doc__", None)
            inherited = not inspect.ismodule(item) and doc is type(item).__doc__
            if not isinstance(doc, str) or inherited:
                continue
            checked += 1
            match = SPHINX_MARKUP.search(doc)
            assert match is None, f"{path}: the docstring has Sphinx markup {match.group(0)!r}"
    assert checked > 40, checked


# -- configuration --------------------------------------------------------------------


def _table(text: str, header: str) -> dict[str, list[str]]:
    """The rows of the Markdown table under the header line ``header``, by first cell."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == header)
    rows: dict[str, list[str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        name = re.match(r"`([^`]+)`", cells[0])
        assert name, line
        rows[name.group(1)] = cells[1:]
    return rows


def _setting_defaults() -> dict[str, Any]:
    """Every ``gaffer_*`` key the package reads, with its default (None: not set)."""
    from celery_gaffer import settings

    defaults: dict[str, Any] = {
        f"gaffer_{field.name}": field.default
        for field in dataclasses.fields(settings.GafferSettings)
        if field.default is not dataclasses.MISSING
    }
    defaults["gaffer_database_url"] = settings.DEFAULT_DATABASE_URL
    # Keys read without a field of their own, wherever the package reads app.conf.
    pattern = re.compile(r"""(?:conf\.get\(|conf\[|conf, )["'](gaffer_[a-z_]+)["']""")
    for source in (ROOT / "celery_gaffer").rglob("*.py"):
        for key in pattern.findall(source.read_text()):
            defaults.setdefault(key, None)
    for value in vars(settings).values():
        names = value if isinstance(value, (set, frozenset, tuple, list, dict)) else (value,)
        for name in names:
            if isinstance(name, str) and re.fullmatch(r"gaffer_[a-z][a-z_]*", name):
                defaults.setdefault(name, None)
    return defaults


def _documented_default(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, float):
        if value >= 86400 and value % 86400 == 0:
            days = int(value // 86400)
            return f"{days} day" if days == 1 else f"{days} days"
        return f"{value:g} s"
    if isinstance(value, str) and "://" in value:
        return f"`{value}`"
    if isinstance(value, str):
        return f"`{value}`"
    return str(value)


def test_every_setting_is_documented_with_its_default() -> None:
    rows = _table((REFERENCE / "configuration.md").read_text(), "| key | default | meaning |")
    defaults = _setting_defaults()
    assert len(defaults) >= 16
    missing = sorted(set(defaults) - set(rows))
    assert not missing, f"configuration.md has no line for {missing}"
    stale = sorted(set(rows) - set(defaults))
    assert not stale, f"configuration.md documents {stale}, which the package does not read"
    for key, default in defaults.items():
        shown = rows[key][0]
        assert shown.startswith(_documented_default(default)), (
            f"configuration.md: {key}'s default is {_documented_default(default)}, not {shown}"
        )


def _schedule_options() -> dict[str, Any]:
    """Every ``gaffer={...}`` option the validation accepts, with the default it applies."""
    from celery_gaffer.exceptions import InvalidInput
    from celery_gaffer.schedules.spec import Policy, validate_policy

    with pytest.raises(InvalidInput) as refused:
        validate_policy({"no-such-option": 1})
    known = re.search(r"\(known: ([^)]*)\)", str(refused.value))
    assert known, refused.value
    policy = validate_policy({})
    defaults = {}
    for option in known.group(1).split(", "):
        if hasattr(policy, option):
            defaults[option] = getattr(policy, option)
        else:  # a bound: start_at, end_at, max_runs
            defaults[option] = getattr(policy.bounds, option)
    assert {field.name for field in dataclasses.fields(Policy)} - {"bounds"} <= set(defaults)
    return defaults


def test_every_per_schedule_option_is_documented_with_its_default() -> None:
    rows = _table((REFERENCE / "configuration.md").read_text(), "| option | default | meaning |")
    options = _schedule_options()
    assert set(rows) == set(options), (
        f"configuration.md's per-schedule table: missing {sorted(set(options) - set(rows))}, "
        f"stale {sorted(set(rows) - set(options))}"
    )
    for option, default in options.items():
        shown = rows[option][0]
        expected = "None" if default is None else f"`{default}`"
        if isinstance(default, bool):
            expected = f"`{default}`"
        assert shown.startswith(expected), (
            f"configuration.md: gaffer option {option}'s default is {expected}, not {shown}"
        )


# -- the internals read as the current state ------------------------------------------

DIARY = re.compile(r"\bsession \d+|\bissue \d+", re.IGNORECASE)


def test_no_page_cites_a_session_or_an_issue_number() -> None:
    pages = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks" / "README.md"]
    assert len(pages) > 20
    for page in pages:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            match = DIARY.search(line)
            assert match is None, (
                f"{page.relative_to(ROOT)}:{number} cites {match.group(0)!r}: say what is "
                "true now (history lives in the changelog and git)"
            )


if __name__ == "__main__":  # regenerate cli.md's option tables
    sys.path.insert(0, str(ROOT))
    write_cli_options()
    print("docs/reference/cli.md: option tables regenerated")
