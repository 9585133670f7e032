"""What installing celery-gaffer costs every ``celery`` command, and ``import celery_gaffer``.

    .venv/bin/python benchmarks/startup.py                  # ~1 min (two venvs, 15 runs each)
    .venv/bin/python benchmarks/startup.py --repeat 30 --python python3.13

Celery loads the ``celery.commands`` entry points of every installed package whenever a
``celery`` command starts, so installing celery-gaffer makes its ``gaffer`` group part of
``celery --help``, ``celery worker`` and ``celery beat`` alike. This script builds two
throwaway venvs with the same interpreter (``--python``, default: the one running it):

* **gaffer**: this checkout installed as a user gets it (``pip install <checkout>``, a
  built wheel, not editable) with its dependencies and no extras;
* **plain**: ``celery`` and ``kombu[redis]`` alone, every package pinned to the version
  the first venv holds (``pip freeze`` as constraints), so the only difference is
  celery-gaffer and what it depends on.

Then, ``--repeat`` times, alternating the two sides so that a drift of the machine's
load favours neither, it times in fresh interpreters (wall clock, from the parent):
``celery --help`` in each venv, and in the gaffer venv ``python -c "import
celery_gaffer"`` against ``python -c "pass"``, with the modules the import adds and its
cumulative time from ``python -X importtime``. One warm-up run of each fills the
bytecode caches first. It prints the median and fastest of each and the differences of
the medians, then the target "installing celery-gaffer adds < 0.1 s to ``celery
--help``" as MET or MISS; exits 1 on a miss. Needs no service; the venvs are deleted
at the end (``--keep DIR`` builds them there and keeps them, and reuses them next time).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import format_table

ROOT = Path(__file__).resolve().parents[1]
#: The target: what installing celery-gaffer may add to `celery --help`, in seconds.
TARGET_S = 0.1
_IMPORTTIME = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \|\s*celery_gaffer$", re.MULTILINE)


def _env() -> dict[str, str]:
    """The environment of every measured command: nothing of this checkout on the path."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _run(words: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(words, cwd=cwd, env=_env(), capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"startup: {' '.join(words)} failed:\n{result.stdout}{result.stderr}")
    return result


def _pip(venv: Path, *args: str) -> None:
    _run([str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", *args], ROOT)


def _copy_of_checkout(dest: Path) -> Path:
    """The files git knows of (committed or not): a build in the checkout would leave
    ``build/`` behind, whose stale files get into later wheels."""
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], ROOT)
    shutil.rmtree(dest, ignore_errors=True)
    for name in filter(None, listed.stdout.split("\0")):
        source = ROOT / name
        if source.is_file():  # not a file deleted but not yet committed
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def build_venvs(python: str, base: Path) -> tuple[Path, Path]:
    """The gaffer venv and the plain one (each reused when ``base`` already holds it)."""
    gaffer, plain = base / "gaffer", base / "plain"
    if not (gaffer / "bin" / "celery").exists():
        print(f"startup: installing this checkout into {gaffer}", flush=True)
        _run([python, "-m", "venv", str(gaffer)], ROOT)
        _pip(gaffer, "install", "--quiet", str(_copy_of_checkout(base / "src")))
    if not (plain / "bin" / "celery").exists():
        print(f"startup: installing celery alone into {plain}, at the same versions", flush=True)
        frozen = _run([str(gaffer / "bin" / "python"), "-m", "pip", "freeze"], ROOT).stdout
        pins = base / "pins.txt"
        pins.write_text(
            "".join(
                line + "\n"
                for line in frozen.splitlines()
                if line and not line.lower().startswith(("celery-gaffer", "celery_gaffer"))
            )
        )
        _run([python, "-m", "venv", str(plain)], ROOT)
        _pip(plain, "install", "--quiet", "-c", str(pins), "celery", "kombu[redis]")
    return gaffer, plain


def _version(venv: Path, name: str) -> str:
    code = f"from importlib.metadata import version; print(version({name!r}))"
    return _run([str(venv / "bin" / "python"), "-c", code], ROOT).stdout.strip()


def _wall(words: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    _run(words, cwd)
    return time.perf_counter() - started


def _import_details(venv: Path, cwd: Path) -> tuple[int, float]:
    """(modules ``import celery_gaffer`` adds, its cumulative ``-X importtime`` in s)."""
    python = str(venv / "bin" / "python")
    count = "import sys; n = len(sys.modules); import celery_gaffer; print(len(sys.modules) - n)"
    added = int(_run([python, "-c", count], cwd).stdout.strip())
    stderr = _run([python, "-X", "importtime", "-c", "import celery_gaffer"], cwd).stderr
    match = _IMPORTTIME.search(stderr)
    if match is None:
        raise SystemExit("startup: -X importtime printed no line for celery_gaffer")
    return added, int(match.group(1)) / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=15, help="timed runs of each (15)")
    parser.add_argument("--python", default=sys.executable, help="the venvs' interpreter")
    parser.add_argument("--keep", type=Path, help="build the venvs here and keep them")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    base = args.keep or Path(tempfile.mkdtemp(prefix="gaffer-startup-"))
    try:
        return measure(args.python, base, args.repeat)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


def measure(python: str, base: Path, repeat: int) -> int:
    gaffer, plain = build_venvs(python, base)
    empty = base / "cwd"  # no app module, no package of this checkout importable
    empty.mkdir(exist_ok=True)
    commands = {
        "celery --help, celery-gaffer installed": [str(gaffer / "bin" / "celery"), "--help"],
        "celery --help, celery alone": [str(plain / "bin" / "celery"), "--help"],
        "python -c 'import celery_gaffer'": [
            str(gaffer / "bin" / "python"),
            "-c",
            "import celery_gaffer",
        ],
        "python -c 'pass'": [str(gaffer / "bin" / "python"), "-c", "pass"],
        "celery gaffer --help": [str(gaffer / "bin" / "celery"), "gaffer", "--help"],
    }
    help_text = _run(commands["celery --help, celery-gaffer installed"], empty).stdout
    if "gaffer" not in help_text:
        raise SystemExit("startup: celery --help does not list the gaffer command")
    for words in commands.values():  # warm-up: bytecode caches
        _run(words, empty)

    times: dict[str, list[float]] = {label: [] for label in commands}
    imports: list[tuple[int, float]] = []
    for n in range(repeat):
        labels = list(commands) if n % 2 == 0 else list(reversed(commands))
        for label in labels:
            times[label].append(_wall(commands[label], empty))
        imports.append(_import_details(gaffer, empty))

    versions = ", ".join(f"{name} {_version(gaffer, name)}" for name in ("celery", "kombu"))
    print(
        f"\nPython {_version_of(gaffer)}; {versions} in both venvs; "
        f"celery-gaffer {_version(gaffer, 'celery-gaffer')}; {repeat} runs each, wall clock"
    )
    medians = {label: statistics.median(values) for label, values in times.items()}
    rows = [
        (label, f"{medians[label]:.3f}", f"{min(values):.3f}") for label, values in times.items()
    ]
    print(format_table(("command", "median s", "fastest s"), rows))

    added_modules = statistics.median(m for m, _ in imports)
    import_cumulative = statistics.median(t for _, t in imports)
    import_cost = medians["python -c 'import celery_gaffer'"] - medians["python -c 'pass'"]
    print(
        f"\nimport celery_gaffer: {import_cost:+.3f} s over an empty interpreter "
        f"(-X importtime: {import_cumulative:.3f} s cumulative, {added_modules:.0f} modules)"
    )
    with_gaffer = medians["celery --help, celery-gaffer installed"]
    added = with_gaffer - medians["celery --help, celery alone"]
    fastest = min(times["celery --help, celery-gaffer installed"]) - min(
        times["celery --help, celery alone"]
    )
    verdict = "MET" if added < TARGET_S else "MISS"
    print(
        f"installing celery-gaffer adds {added:+.3f} s to celery --help, medians "
        f"({fastest:+.3f} s fastest against fastest; target < {TARGET_S} s): {verdict}"
    )
    return 0 if verdict == "MET" else 1


def _version_of(venv: Path) -> str:
    code = "import platform; print(platform.python_version())"
    return _run([str(venv / "bin" / "python"), "-c", code], ROOT).stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
