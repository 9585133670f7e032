"""``python manage.py gaffer <command> [args]``: the ``celery gaffer`` commands (migrate,
status, schedules, pause, resume, trigger, audit...) with the project's settings and
Celery app (``GAFFER_CELERY_APP``, else Celery's current app).

Everything after ``gaffer`` is the command line of ``celery -A proj gaffer``, parsed by
its own click group, and the exit code is that command's: 0 done, 1 an alert (``status``),
2 an error, said in one line on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand

from .....cli import gaffer
from .....exceptions import GafferError
from ...conf import celery_app

# Django's own options, handled by manage.py before the command runs: not gaffer's.
DJANGO_OPTIONS = ("--settings", "--pythonpath")


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no type hints
    help = "celery-gaffer's commands (`manage.py gaffer --help` lists them)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER, help="a gaffer command line")

    def run_from_argv(self, argv: list[str]) -> None:
        # The gaffer command line reaches click untouched (Django's parser would read
        # its --help and options as its own).
        self.execute(*_without_django_options(argv[2:]))

    def print_help(self, prog_name: str, subcommand: str) -> None:
        self.execute("--help")

    def execute(self, *args: Any, **options: Any) -> None:
        # No Django system checks, no output wrapping: click writes to the terminal.
        self.handle(*args)

    def handle(self, *args: Any, **options: Any) -> None:
        code = run(list(args), prog_name=f"{os.path.basename(sys.argv[0])} gaffer")
        if code:
            sys.exit(code)


def run(args: list[str], *, prog_name: str = "manage.py gaffer") -> int:
    """Run the gaffer command line ``args`` on the Django project's Celery app; its exit
    code (a failure exits itself, 2, after its one line on stderr)."""
    from celery.bin.base import CLIContext

    try:
        app = celery_app()
    except GafferError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    context = CLIContext(app=app, no_color=False, workdir=None, quiet=False)
    code = gaffer.main(args=args, prog_name=prog_name, standalone_mode=False, obj=context)
    return code if isinstance(code, int) else 0


def _without_django_options(args: list[str]) -> list[str]:
    """``args`` without ``--settings``/``--pythonpath`` and their values."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in DJANGO_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{option}=" for option in DJANGO_OPTIONS)):
            kept.append(arg)
    return kept
