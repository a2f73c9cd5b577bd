"""Wall time of ``lite-ppo --help`` and of every ``lite-ppo <command> --help`` (fresh processes).

Each help runs ``--runs`` times as a subprocess of the installed ``lite-ppo`` script; the median is
printed, with the floor that ``fit`` / ``validate`` / ``test`` cannot go below (LightningCLI needs
``import lightning.pytorch``, which imports torch, torchmetrics and, through it, transformers).

    .venv/bin/python benchmarks/bench_cli_help.py            # every command, 3 runs each
    .venv/bin/python benchmarks/bench_cli_help.py --runs 5 fit evaluate
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from lite_ppo.commands import COMMANDS


def wall_time(argv: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return time.perf_counter() - start, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commands", nargs="*", help="commands to time (default: all, and the top-level help)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    script = Path(sys.executable).with_name("lite-ppo")
    if not script.exists():
        raise SystemExit(f"{script} not found: install the package (make install)")
    targets = [[c] for c in args.commands] if args.commands else [[]] + [[c.name] for c in COMMANDS]
    rows = [("import lightning.pytorch (floor of fit/validate/test)", [sys.executable, "-c", "import lightning.pytorch"])]
    rows += [(" ".join(["lite-ppo", *t, "--help"]), [str(script), *t, "--help"]) for t in targets]
    print(f"{'command':<58} {'median s':>9} {'min s':>7} {'max s':>7}  exit")
    for label, argv in rows:
        times, codes = zip(*(wall_time(argv) for _ in range(args.runs)))
        print(f"{label:<58} {statistics.median(times):9.2f} {min(times):7.2f} {max(times):7.2f}  {sorted(set(codes))}", flush=True)
    print(f"({args.runs} runs each; os.cpu_count()={os.cpu_count()}; load average {os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    main()
