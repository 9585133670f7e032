"""The documentation's code blocks stay runnable, and the API reference stays complete.

The blocks themselves run in the acceptance suite (``tests/acceptance/test_tutorial.py``
and ``test_docs_pages.py``, through :mod:`tests.docs_runner`); this module checks, with
no process started, that every block of the pages users follow is one of those runs or
says in the page why it is not, and that the runner reads pages as the pages mean.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ..docs_runner import (
    DOCS,
    RUNNABLE,
    blocks_of,
    check_pip_install,
    commands_of,
    compare_output,
    is_long_running,
    page_id,
    page_paths,
    parse,
)

ROOT = Path(__file__).resolve().parents[2]
#: Pages that explain or list rather than walk through steps: their blocks are not run.
READ_ONLY_PAGES = {
    "changelog.md",
    "dst.md",
    "reliability.md",
    "scale.md",
    "concepts/architecture.md",
    "concepts/guarantees.md",
    "concepts/leases.md",
    "concepts/ledger.md",
    "reference/api.md",
    "reference/cli.md",
    "reference/configuration.md",
    "reference/django.md",
}
#: Languages that look like code to run: a page must use one the runner knows instead.
CODE_LIKE = {"sh", "shell", "zsh", "shell-session", "py", "python3", "pycon", "ipython"}


def test_every_page_is_run_or_listed_as_read_only() -> None:
    run = {page_id(path) for path in page_paths()}
    every = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    unknown = every - run - READ_ONLY_PAGES
    assert not unknown, f"run these pages (tests/docs_runner.py PAGES) or list them: {unknown}"
    assert run <= every, f"pages that no longer exist: {run - every}"


@pytest.mark.parametrize("path", page_paths(), ids=page_id)
def test_every_code_block_runs_or_says_why_not(path: Path) -> None:
    """Each runnable block is an example of the runner's (so it runs), or has a skip
    with a reason right above it; no block hides in a language the runner ignores."""
    blocks = blocks_of(path)
    examples = {example.line for example in parse(path)}
    text = path.read_text()
    fences = re.findall(r"^[ \t]*```+[ \t]*([\w+-]*)", text, re.MULTILINE)
    assert not CODE_LIKE & set(fences), f"use one of {RUNNABLE} (or text) for code blocks"
    for block in blocks:
        where = f"{page_id(path)}, line {block.line}"
        assert block.line in examples, f"{where}: the runner does not read this block"
        if block.skip_reason is not None:
            assert block.skip_reason, f"{where}: a skip needs its reason"
    skips = len(re.findall(r"<!--\s*skip:", text))
    assert skips == sum(block.skip_reason is not None for block in blocks), (
        f"{page_id(path)}: every skip directive must be right above the block it skips"
    )


def test_the_pages_run_most_of_their_blocks() -> None:
    """The count: how many blocks run and how many say why not, page by page."""
    counts = {}
    for path in page_paths():
        blocks = blocks_of(path)
        skipped = sum(block.skip_reason is not None for block in blocks)
        counts[page_id(path)] = (len(blocks) - skipped, skipped)
    ran = sum(run for run, _ in counts.values())
    skipped = sum(skip for _, skip in counts.values())
    assert ran > 3 * skipped, counts
    for page in ("tutorial.md", "index.md", "how-to/testing.md", "how-to/explain.md"):
        assert counts[page][0] >= 3, (page, counts[page])


def test_the_tutorial_is_a_project_with_a_worker_beat_the_cli_and_the_console() -> None:
    tutorial = DOCS / "tutorial.md"
    titled = [block.title for block in blocks_of(tutorial) if block.title]
    assert titled == ["shop.py", "seed.py", "pay_twice.py"]
    commands = [
        command.line
        for example in parse(tutorial)
        if example.region.lexemes.get("arguments") == "console"
        for command in commands_of(str(example.parsed))
    ]
    order = [
        "celery -A shop gaffer migrate",
        "celery -A shop worker --loglevel=INFO",
        "celery -A shop beat -S gaffer --loglevel=INFO",
        "celery -A shop gaffer status",
        "celery -A shop gaffer web",
    ]
    positions = [commands.index(command) for command in order]
    assert positions == sorted(positions), commands
    # Health through the public API only: no import of celery_gaffer's internals.
    for path in (tutorial, DOCS / "index.md"):
        text = path.read_text()
        assert not re.search(r"celery_gaffer\.(beat|clock|runs|fencing)\b", text), path


def test_shown_output_is_compared_line_by_line_with_dots_for_any_lines() -> None:
    assert compare_output(["a", "b"], ["a", "b", ""]) is None
    assert compare_output(["a", "...", "d"], ["a", "b", "c", "d"]) is None
    assert compare_output(["a", "...", "d"], ["a", "d"]) is None
    assert compare_output(["a", "b"], ["a", "c"]) is not None
    assert compare_output(["a"], ["a", "b"]) is not None


def test_console_blocks_are_commands_with_or_without_their_output() -> None:
    shown = commands_of("$ celery -A proj gaffer status\nok\n$ # a comment\n$ ls \\\n  -l\n")
    assert [(c.line, c.output) for c in shown] == [
        ("celery -A proj gaffer status", ["ok"]),
        ("ls   -l", None),
    ]
    plain = commands_of("celery -A proj gaffer migrate\n\ncelery -A proj worker  # terminal 2\n")
    assert [(c.line, c.output) for c in plain] == [
        ("celery -A proj gaffer migrate", None),
        ("celery -A proj worker  # terminal 2", None),
    ]


@pytest.mark.parametrize(
    ("command", "long_running"),
    [
        ("celery -A shop worker --loglevel=INFO", True),
        ("celery -A shop beat -S gaffer", True),
        ("celery -A proj worker &", True),
        ("celery -A shop gaffer web --port 5558", True),
        ("celery -A shop gaffer status", False),
        ("celery -A proj gaffer runs --schedule worker", False),
        ("python seed.py", False),
    ],
)
def test_workers_beats_and_consoles_run_in_the_background(command: str, long_running: bool) -> None:
    assert is_long_running(command.split()) is long_running


def test_pip_install_lines_name_this_package_and_its_extras() -> None:
    check_pip_install(["celery-gaffer"])
    check_pip_install(["celery-gaffer[web,metrics]"])
    with pytest.raises(AssertionError, match="no extra"):
        check_pip_install(["celery-gaffer[webb]"])
    with pytest.raises(AssertionError, match="not celery-gaffer"):
        check_pip_install(["celery-gafer"])


API_HEADINGS = {
    "package": "## `celery_gaffer`",
    "task": "## `GafferTask` members",
    "store": "## `ScheduleStore(app)` methods",
    "signals": "## Signals: `celery_gaffer.signals`",
    "exceptions": "## Exceptions: `celery_gaffer.exceptions`",
}


def _api_tables() -> dict[str, list[str]]:
    """The names in the first column of each table of docs/reference/api.md, by heading:
    ``store.add(name, ...)`` and ``self.session()`` give ``add`` and ``session``."""
    text = (ROOT / "docs" / "reference" / "api.md").read_text()
    tables: dict[str, list[str]] = {}
    heading = ""
    for line in text.split("## Generated reference")[0].splitlines():
        if line.startswith("## "):
            heading = line.strip()
            tables[heading] = []
        elif line.startswith("| `"):
            first_cell = line.split("|")[1]
            span = re.search(r"`([^`]+)`", first_cell)
            assert span, line
            tables[heading].append(span.group(1).split("(")[0].split(".")[-1])
    return tables


def _public_members(cls: type, *, own_of: tuple[type, ...] = ()) -> set[str]:
    classes = own_of or (cls,)
    return {name for c in classes for name in vars(c) if not name.startswith("_")}


def test_the_api_reference_lists_every_public_name_and_no_other() -> None:
    import celery_gaffer
    from celery_gaffer import GafferTask, ScheduleStore, exceptions, signals
    from celery_gaffer.runs.delivery import DeliveryPolicy

    tables = _api_tables()
    expected = {
        "package": set(celery_gaffer.__all__),
        "task": _public_members(GafferTask, own_of=(GafferTask, DeliveryPolicy)),
        "store": _public_members(ScheduleStore, own_of=ScheduleStore.__mro__[:-1]),
        "signals": set(signals.__all__),
        "exceptions": {
            name
            for name, obj in vars(exceptions).items()
            if isinstance(obj, type) and issubclass(obj, exceptions.GafferError)
        },
    }
    for part, names in expected.items():
        heading = API_HEADINGS[part]
        assert heading in tables, f"docs/reference/api.md has no {heading!r} table"
        listed = tables[heading]
        assert len(listed) == len(set(listed)), f"{heading}: a name is listed twice: {listed}"
        missing, stale = names - set(listed), set(listed) - names
        assert not missing, f"{heading}: add a line for each of {sorted(missing)}"
        assert not stale, f"{heading}: {sorted(stale)} no longer exist"
