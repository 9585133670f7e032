#!/usr/bin/env python
"""One benchmark, side by side on another checkout and on this one, in one run.

    python benchmarks/side_by_side.py --base DIR [--rounds 2] [--logs DIR] \\
        BENCHMARK [-- ARGS...]

``BENCHMARK`` is a script of ``benchmarks/`` (``task_overhead``, ``beat``, ``lag``; with
or without ``.py``) and ``ARGS`` its own arguments. ``--base DIR`` is another checkout
(for example an older commit) with its own ``.venv`` (``make install`` there, plus the
benchmark-only packages). Each round runs the benchmark once from each checkout: that
checkout's own script with that checkout's own ``.venv/bin/python``, in that checkout's
directory, so each measures its own ``celery_gaffer``. The order flips every round
(base first, then this checkout first, ...), so a drift of the machine's load does not
always favour the same side. Runs go one after the other, never at once: they use the
same Redis databases and PostgreSQL server.

Each run's output goes to a log file (``--logs``, a new temporary directory by
default); the lines that carry its ratios are printed as it ends, then a table of every
figure for both sides, their medians and now / base. ``PYTHONPATH`` and the variables
``GAFFER_BENCH_*`` are not passed on, so neither side can import the other's code.
Exits 0 when every run ended (a benchmark that misses a target exits 1, which counts
as ended), 2 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
NOW = os.path.dirname(HERE)

#: Per benchmark, the lines that carry its ratios: a pattern whose match gives a figure's
#: value (group ``value``) and its name (the template filled with the groups). The
#: targets' thresholds are left out of the names: the two sides may differ in them.
PATTERNS: dict[str, list[tuple[re.Pattern[str], str]]] = {
    "task_overhead": [
        # "MET  gaffer >= 0.72x plain: 0.80x paired median (0.78x overall)"
        (re.compile(r"(?:MET |MISS) (?P<variant>\S+) >= [\d.]+x (?P<of>plain|hand loop): "
                    r"(?P<value>[\d.]+)x paired median"), "{variant} / {of}, paired median"),
        # "floors by hand (paired medians vs plain): keyed 0.90x, recorded 0.85x; ..."
        (re.compile(r"floors by hand .*?: keyed (?P<value>[\d.]+)x"),
         "keyed / plain, paired median"),
        (re.compile(r"floors by hand .*?, recorded (?P<value>[\d.]+)x"),
         "recorded / plain, paired median"),
    ],
    "beat": [
        # "[MET ] N=10,000: gaffer dispatch / batched bare send_task >= 0.75: 0.80 (paired..."
        (re.compile(r"\[(?:MET |MISS|n/a )\] (?P<what>N=[\d,]+: [^:]+?) [<>]=? [\d.]+[^:]*: "
                    r"(?P<value>[\d.]+)"), "{what}"),
    ],
    "lag": [
        # "[MISS] jitter 1: p99 869 ms" / "[info] jitter 0 (one burst ...): p99 378 ms; ..."
        (re.compile(r"\[(?:MET |MISS|info)\] jitter (?P<jitter>[\d.]+)[^:]*: "
                    r"p99 (?P<value>[\d,.]+) ms"), "1 Beat, jitter {jitter}: p99 ms"),
    ],
}  # fmt: skip
#: Lines printed with a run's figures (not tabulated): what code ran, the load.
CONTEXT = re.compile(r"celery-gaffer code measured|load average at (?:start|end)|^total \d")


@dataclass
class Run:
    side: str
    round: int
    returncode: int | None = None
    seconds: float = 0.0
    log: str = ""
    figures: dict[str, float] = field(default_factory=dict)


def figures_of(benchmark: str, text: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in text.splitlines():
        for pattern, name in PATTERNS.get(benchmark, []):
            match = pattern.search(line)
            if match:
                found[name.format(**match.groupdict())] = float(
                    match.group("value").replace(",", "")
                )
    return found


def key_lines(benchmark: str, text: str) -> list[str]:
    patterns = PATTERNS.get(benchmark, [])
    return [
        line.strip()
        for line in text.splitlines()
        if CONTEXT.search(line.strip()) or any(p.search(line) for p, _ in patterns)
    ]


def environment(checkout: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("GAFFER_BENCH_")
    }
    env["PATH"] = os.path.join(checkout, ".venv", "bin") + os.pathsep + env.get("PATH", "")
    return env


def run_once(
    side: str, checkout: str, benchmark: str, args: list[str], round_: int, logs: str
) -> Run:
    run = Run(side, round_, log=os.path.join(logs, f"{benchmark}-{side}-{round_}.log"))
    python = os.path.join(checkout, ".venv", "bin", "python")
    command = [python, os.path.join(checkout, "benchmarks", benchmark + ".py"), *args]
    print(f"\n== round {round_}, {side} ({checkout}): {' '.join(command)}", flush=True)
    started = time.monotonic()
    with open(run.log, "w") as log:
        done = subprocess.run(
            command, cwd=checkout, env=environment(checkout), stdout=subprocess.PIPE,
            stderr=log, text=True, check=False,
        )  # fmt: skip
        log.write("\n== stdout ==\n" + done.stdout)
    run.returncode, run.seconds = done.returncode, time.monotonic() - started
    run.figures = figures_of(benchmark, done.stdout)
    for line in key_lines(benchmark, done.stdout):
        print(f"  {line}")
    print(f"  exit {run.returncode} after {run.seconds:.0f} s; log {run.log}", flush=True)
    return run


def table(runs: list[Run]) -> str:
    names: list[str] = []
    for run in runs:
        names += [n for n in run.figures if n not in names]
    rows = [["figure", "base", "now", "base median", "now median", "now / base"]]
    for name in names:
        sides = {
            side: [r.figures[name] for r in runs if r.side == side and name in r.figures]
            for side in ("base", "now")
        }
        medians = {side: statistics.median(v) if v else None for side, v in sides.items()}
        base, now = medians["base"], medians["now"]
        rows.append(
            [
                name,
                ", ".join(f"{v:g}" for v in sides["base"]) or "-",
                ", ".join(f"{v:g}" for v in sides["now"]) or "-",
                "-" if base is None else f"{base:g}",
                "-" if now is None else f"{now:g}",
                f"{now / base:.2f}" if base and now is not None else "-",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0] if __doc__ else None,
        usage="%(prog)s --base DIR [--rounds N] [--logs DIR] BENCHMARK [-- ARGS...]",
    )
    parser.add_argument("--base", required=True, help="the other checkout (with its .venv)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side (2)")
    parser.add_argument("--logs", help="folder for each run's output (a new temporary one)")
    parser.add_argument("benchmark", help="task_overhead, beat, lag, ...")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the benchmark's arguments")
    args = parser.parse_args(argv)
    args.benchmark = args.benchmark.removesuffix(".py")
    args.args = args.args[1:] if args.args[:1] == ["--"] else args.args
    args.base = os.path.abspath(args.base)
    for checkout in (args.base, NOW):
        if not os.access(os.path.join(checkout, ".venv", "bin", "python"), os.X_OK):
            parser.error(f"{checkout} has no .venv/bin/python")
        if not os.path.isfile(os.path.join(checkout, "benchmarks", args.benchmark + ".py")):
            parser.error(f"{checkout} has no benchmarks/{args.benchmark}.py")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logs = args.logs or tempfile.mkdtemp(prefix=f"side-by-side-{args.benchmark}-")
    os.makedirs(logs, exist_ok=True)
    sides = [("base", args.base), ("now", NOW)]
    runs: list[Run] = []
    for round_ in range(1, args.rounds + 1):
        for side, checkout in sides if round_ % 2 else sides[::-1]:
            runs.append(run_once(side, checkout, args.benchmark, args.args, round_, logs))
    print(f"\n{args.benchmark} {' '.join(args.args)}: base {args.base}, now {NOW}")
    print(table(runs))
    failed = [r for r in runs if r.returncode not in (0, 1) or not r.figures]
    for run in failed:
        print(f"FAILED: round {run.round}, {run.side}: exit {run.returncode}, see {run.log}")
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
