"""Run the code blocks of a documentation page, in order, in a folder of its own (Sybil).

What a page writes, and what this runner does with it:

* A ```` ```python ```` block runs in the page's one namespace, in page order, with the
  folder as the current directory and first on ``sys.path`` (so ``import shop`` finds a
  file an earlier block saved).
* A block with a title, ```` ```python title="shop.py" ````, is a file to save: it is
  written into the folder, not run.
* ```` ```console ```` and ```` ```bash ```` blocks are shell commands, run one by one in
  the folder, with this interpreter's ``bin`` folder first on ``PATH`` (so ``celery`` and
  ``python`` are the ones under test; ``GAFFER_DOCS_BIN`` names another, such as a venv
  holding the built wheel). In a block whose lines start with ``$ ``, those
  lines are the commands and the lines under each are its output, compared line by line
  (trailing spaces ignored; a line ``...`` stands for any number of lines); a command
  shown without output must exit 0. In a block without ``$ ``, every line is a command
  that must exit 0. A line ending in ``\\`` goes on on the next line; ``#`` starts a
  comment.
* ``pip install`` commands are not run (the suite runs against the package installed
  in it): each requirement must name this package, with extras it has and that are
  installed.
* Commands that run until stopped (``celery ... worker``, ``celery ... beat``,
  ``celery ... gaffer web``) are started in the background by the test's
  :class:`Services` (:class:`tests.docs_processes.Background`), and stopped when the
  page ends; without one they fail the page.
* ``export NAME=value`` sets the variable for the page's later commands.
* ``<!-- skip: next "reason" -->`` (Sybil's directive) leaves the next block unrun; the
  reason is required (``tests/unit/test_docs.py`` checks every page with
  :func:`blocks_of`, a scan that does not depend on Sybil).
* ``<!-- invisible-code-block: python ... -->`` (Sybil's) is setup the reader does not
  see: it runs in order like a visible block.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Protocol
from unittest import SkipTest

from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PACKAGE = "celery-gaffer"
#: The languages whose blocks are code to run; every other block (text, json, yaml,
#: ini...) is something to read.
RUNNABLE = ("python", "console", "bash")
#: The pages written for users to follow: every block of theirs runs or says why not.
PAGES = ("index.md", "tutorial.md", "deployment.md", "data.md", "upgrading.md")
COMMAND_TIMEOUT = 120
NAMESPACE_KEY = "__docs_page__"


class Services(Protocol):
    """Starts the page's long-running commands and stops them when the page ends."""

    def start(self, command: str, folder: Path, env: dict[str, str]) -> None:
        """Start ``command`` (without a trailing ``&``) and return once it is ready."""

    def before(self, command: str) -> str:
        """Called before each other command: wait for what it needs to see; the command
        to run (the same, or with the address of a service started on a free port)."""

    def stop_all(self) -> None: ...


@dataclass
class Page:
    """The state of one page's run: its folder, environment and what it ran."""

    path: Path
    folder: Path
    env: dict[str, str]
    services: Services | None = None
    ran: list[str] = field(default_factory=list)  # "file shop.py", "$ cmd"...
    skipped: list[str] = field(default_factory=list)  # the skip reasons, in order
    outputs: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)


def page_paths() -> list[Path]:
    """Every page of the tutorial, the how-to guides and the operations pages."""
    return [DOCS / name for name in PAGES] + sorted((DOCS / "how-to").glob("*.md"))


def page_id(path: Path) -> str:
    return str(path.relative_to(DOCS))


# ---------------------------------------------------------------------------- parsing


class FileBlockParser:
    """```` ```python title="path" ```` blocks: files to save into the page's folder (a
    titled block in another language, a unit file say, is only shown)."""

    def __init__(self) -> None:
        self.lexer = RawFencedCodeBlockLexer(
            info_pattern=re.compile(
                r'(?P<language>python)[ \t]+title="(?P<title>[^"]+)"[ \t]*$\n', re.MULTILINE
            )
        )

    def __call__(self, document: Document) -> Iterator[Region]:
        for region in self.lexer(document):
            region.parsed = (region.lexemes["title"], str(region.lexemes["source"]))
            region.evaluator = _save_file
            yield region


def _sybil() -> Sybil:
    return Sybil(
        parsers=[
            SkipParser(),
            PythonCodeBlockParser(),
            FileBlockParser(),
            CodeBlockParser("console", _run_commands),
            CodeBlockParser("bash", _run_commands),
        ],
        path=str(DOCS),
    )


def parse(path: Path) -> Document:
    return _sybil().parse(path)


# ------------------------------------------------------------------------- evaluating


def run_page(path: Path, folder: Path, *, services: Services | None = None) -> Page:
    """Run every block of the page at ``path`` in ``folder``; AssertionError naming the
    block (its line) for the first one that fails. Returns what ran and what was skipped."""
    document = parse(path)
    page = Page(path, folder, _environment(), services)
    document.namespace[NAMESPACE_KEY] = page
    document.namespace["__name__"] = "__docs__"
    try:
        with _in_folder(folder):
            for example in document:
                try:
                    example.evaluate()
                except SkipTest as skip:
                    page.skipped.append(str(skip))
                except Exception as exc:
                    where = f"{page_id(path)}, line {example.line}"
                    raise AssertionError(f"{where}: {type(exc).__name__}: {exc}") from exc
    finally:
        if services is not None:
            services.stop_all()
    return page


def _page(example: Example) -> Page:
    page = example.namespace[NAMESPACE_KEY]
    assert isinstance(page, Page)
    return page


@contextmanager
def _in_folder(folder: Path) -> Iterator[None]:
    """``folder`` as the current directory and first on sys.path; the modules imported
    from it are forgotten afterwards (the next page may save a module of the same name)."""
    before, old_path = os.getcwd(), list(sys.path)
    os.chdir(folder)
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        os.chdir(before)
        sys.path[:] = old_path
        for name, module in list(sys.modules.items()):
            origin = getattr(module, "__file__", None) or ""
            if origin.startswith(str(folder)):
                del sys.modules[name]


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    # GAFFER_DOCS_BIN: the bin folder of another install to follow the pages with (the
    # built wheel in a fresh venv, as a new user would have it; .ci/package sets it).
    bin_folder = os.environ.get("GAFFER_DOCS_BIN") or str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_folder, env.get("PATH", "")])
    for command in ("celery", "python"):
        found = shutil.which(command, path=env["PATH"])
        assert found, (command, bin_folder)
        assert Path(found).parent == Path(bin_folder), (command, found, bin_folder)
    env["PYTHONUNBUFFERED"] = "1"
    # Output is compared: a dependency's deprecation notice is not the program's.
    env["PYTHONWARNINGS"] = "ignore::DeprecationWarning,ignore::PendingDeprecationWarning"
    env["COLUMNS"] = "200"
    return env


def _save_file(example: Example) -> None:
    title, source = example.parsed
    page = _page(example)
    target = page.folder / title
    assert page.folder in target.resolve().parents, f"{title!r} is outside the page's folder"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(source)
    page.ran.append(f"file {title}")


@dataclass(frozen=True)
class Command:
    line: str
    output: list[str] | None  # None: not shown (must exit 0)


def commands_of(source: str) -> list[Command]:
    """The commands of a console block, with their output when the block shows it."""
    lines = _joined(source.splitlines())
    if not any(line.startswith("$ ") or line == "$" for line in lines):
        return [Command(line, None) for line in lines if _words(line)]
    commands: list[Command] = []
    for line in lines:
        if line.startswith("$ ") or line == "$":
            commands.append(Command(line[2:], None))
        elif commands:
            shown = commands[-1].output or []
            commands[-1] = Command(commands[-1].line, [*shown, line])
    return [command for command in commands if _words(command.line)]


def _joined(lines: Sequence[str]) -> list[str]:
    joined: list[str] = []
    pending = ""
    for line in lines:
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        joined.append(pending + line)
        pending = ""
    if pending:
        joined.append(pending)
    return joined


def _words(line: str) -> list[str]:
    return shlex.split(line, comments=True)


def _run_commands(example: Example) -> None:
    page = _page(example)
    for command in commands_of(str(example.parsed)):
        _run(page, command)


#: Celery's global options that take a value (``celery -A proj worker``: ``proj``).
_VALUED_OPTIONS = (
    "-A",
    "--app",
    "-b",
    "--broker",
    "--result-backend",
    "--loader",
    "--config",
    "--workdir",
)


def is_long_running(words: Sequence[str]) -> bool:
    """A ``celery`` worker, Beat or web console: runs until stopped."""
    if not words or Path(words[0]).name != "celery":
        return False
    rest, skip_value = [], False
    for word in words[1:]:
        if skip_value:
            skip_value = False
        elif word in _VALUED_OPTIONS:
            skip_value = True
        elif not word.startswith("-") and word != "&":
            rest.append(word)
    return rest[:1] in (["worker"], ["beat"]) or rest[:2] == ["gaffer", "web"]


def _run(page: Page, command: Command) -> None:
    words = _words(command.line)
    if words[:2] == ["pip", "install"]:
        check_pip_install(words[2:])
        page.ran.append(f"$ {command.line} (checked, not run)")
        return
    if words[0] == "export":
        _export(page, command.line)
        page.ran.append(f"$ {command.line}")
        return
    if is_long_running(words):
        assert page.services is not None, (
            f"{command.line!r} runs until stopped: run this page with Services"
        )
        page.services.start(shlex.join(w for w in words if w != "&"), page.folder, page.env)
        page.ran.append(f"$ {command.line} (started)")
        return
    line = command.line if page.services is None else page.services.before(command.line)
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", line],
        cwd=page.folder,
        env=page.env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    page.ran.append(f"$ {command.line}")
    page.outputs[command.line] = done
    got = (done.stdout + done.stderr).splitlines()
    if command.output is None:
        assert done.returncode == 0, (
            f"$ {command.line}\nexit status {done.returncode}:\n" + "\n".join(got)
        )
    else:
        mismatch = compare_output(command.output, got)
        assert mismatch is None, f"$ {command.line}\n{mismatch}"


def compare_output(shown: Sequence[str], got: Sequence[str]) -> str | None:
    """None when ``got`` matches the ``shown`` lines (``...`` for any lines), else why not."""
    want = [line.rstrip() for line in shown]
    have = [line.rstrip() for line in got]
    while want and not want[-1]:
        want.pop()
    while have and not have[-1]:
        have.pop()
    if _matches(want, have):
        return None
    return "the page shows:\n" + "\n".join(want) + "\nthe command printed:\n" + "\n".join(have)


def _matches(want: Sequence[str], have: Sequence[str]) -> bool:
    if not want:
        return not have
    if want[0] == "...":
        return any(_matches(want[1:], have[start:]) for start in range(len(have) + 1))
    return bool(have) and want[0] == have[0] and _matches(want[1:], have[1:])


def _export(page: Page, line: str) -> None:
    name = line.split(None, 1)[1].split("=", 1)[0]
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name), line
    done = subprocess.run(
        ["bash", "-c", f'{line}; printf %s "${name}"'],
        cwd=page.folder,
        env=page.env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=True,
    )
    page.env[name] = done.stdout


def check_pip_install(arguments: Sequence[str]) -> None:
    """Each requirement names this package, with extras it declares, all installed."""
    from packaging.requirements import Requirement

    requirements = [Requirement(argument) for argument in arguments if not argument.startswith("-")]
    assert requirements, "pip install of nothing"
    declared = set(metadata.metadata(PACKAGE).get_all("Provides-Extra") or [])
    for requirement in requirements:
        assert requirement.name == PACKAGE, f"pip install {requirement}: not {PACKAGE}"
        unknown = requirement.extras - declared
        assert not unknown, f"{PACKAGE} has no extra {sorted(unknown)} (it has {sorted(declared)})"
        for extra in requirement.extras:
            for needed in metadata.requires(PACKAGE) or []:
                wanted = Requirement(needed)
                if wanted.marker is not None and wanted.marker.evaluate({"extra": extra}):
                    metadata.version(wanted.name)  # PackageNotFoundError: not installed


# ---------------------------------------------------------------------------- counting


@dataclass(frozen=True)
class Block:
    """A fenced block of code to run, found by a plain scan of the page."""

    line: int
    language: str
    title: str | None
    skip_reason: str | None


FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+)(?P<info>[^\n`]*)$", re.MULTILINE)
SKIP = re.compile(r"<!--\s*skip:\s*next(?P<reason>[^\n]*?)\s*-->\s*$")


def blocks_of(path: Path) -> list[Block]:
    """The runnable blocks of a page (see :data:`RUNNABLE`), each with its skip reason if
    a ``<!-- skip: next "..." -->`` line is right above it. Independent of Sybil, so
    that a block Sybil would not find is still counted."""
    text = path.read_text()
    lines = text.splitlines()
    blocks: list[Block] = []
    inside: str | None = None
    for number, line in enumerate(lines, 1):
        match = FENCE.match(line)
        if match is None:
            continue
        if inside is not None:
            if match.group("fence") == inside and not match.group("info").strip():
                inside = None
            continue
        inside = match.group("fence")
        info = match.group("info").strip()
        language = info.split()[0] if info else ""
        if language not in RUNNABLE:
            continue
        title = re.search(r'title="([^"]+)"', info)
        above = next((lines[i] for i in range(number - 2, -1, -1) if lines[i].strip()), "")
        skip = SKIP.search(above)
        reason = None
        if skip is not None:
            reason = skip.group("reason").strip().strip("\"'").strip()
        blocks.append(Block(number, language, title.group(1) if title else None, reason))
    return blocks
