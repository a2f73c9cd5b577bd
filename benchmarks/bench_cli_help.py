"""Wall time of ``lite-ppo --help`` and of every ``lite-ppo <command> --help`` (fresh processes).

Each help runs ``--runs`` times as a subprocess of the installed ``lite-ppo`` script; the median is
printed, with the floor that uncached ``fit`` / ``validate`` / ``test`` cannot go below (LightningCLI
needs ``import lightning.pytorch``, which imports torch, torchmetrics and, through it, transformers).
Their help is cached (``lite_ppo.cli.help_cache``), so each of them has three rows: ``cache off``
(``LITE_PPO_HELP_CACHE=0``, the real path every time), ``first call`` (an empty cache: the real help
in a child process, then stored) and ``cached`` (read from the cache, filled by one untimed call).
The caches are temporary folders; the user's cache is not touched.

    .venv/bin/python benchmarks/bench_cli_help.py            # every command, 3 runs each
    .venv/bin/python benchmarks/bench_cli_help.py --runs 5 fit evaluate
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lite_ppo.cli.commands import COMMANDS
from lite_ppo.cli.help_cache import CACHED_COMMANDS, OFF_ENV


def wall_time(argv: list[str], env: dict[str, str] | None = None, fresh_cache: bool = False) -> tuple[float, int]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    with tempfile.TemporaryDirectory(prefix="lite_ppo_help_") as empty:
        if fresh_cache:
            env["LITE_PPO_CACHE"] = empty
        start = time.perf_counter()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
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
    filled = tempfile.TemporaryDirectory(prefix="lite_ppo_help_")
    cached = {"LITE_PPO_CACHE": filled.name}
    rows = [
        (
            "import lightning.pytorch (floor of uncached fit/validate/test)",
            [sys.executable, "-c", "import lightning.pytorch"],
            {},
            False,
        )
    ]
    for t in targets:
        label, argv = " ".join(["lite-ppo", *t, "--help"]), [str(script), *t, "--help"]
        if t and t[0] in CACHED_COMMANDS:
            rows += [
                (f"{label} (cache off)", argv, {OFF_ENV: "0"}, False),
                (f"{label} (first call)", argv, {}, True),
                (f"{label} (cached)", argv, cached, False),
            ]
        else:
            rows.append((label, argv, {}, False))
    print(f"{'command':<64} {'median s':>9} {'min s':>7} {'max s':>7}  exit")
    for label, argv, env, fresh in rows:
        if env is cached:
            wall_time(argv, env)  # fills the cache (a source edited meanwhile makes a timed call miss: see max)
        times, codes = zip(*(wall_time(argv, env, fresh) for _ in range(args.runs)))
        print(
            f"{label:<64} {statistics.median(times):9.2f} {min(times):7.2f} {max(times):7.2f}  {sorted(set(codes))}",
            flush=True,
        )
    filled.cleanup()
    print(f"({args.runs} runs each; os.cpu_count()={os.cpu_count()}; load average {os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    main()
