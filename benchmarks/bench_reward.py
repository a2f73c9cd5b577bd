"""Reward scoring speed: serial (in-process) vs the worker pool, on normal and pathological batches.

Prints, for ``MathVerifyReward``:

- worker start-up: seconds until a fresh pool of ``--workers`` processes is ready (and one worker);
- normal responses (``--normal`` of them: MATH reference solutions from the training data when
  ``--data-dir`` has them, else synthetic worked answers): seconds serial (``workers=0``) vs the
  warm pool, the CPU seconds each used (a busy machine stretches wall times, not CPU), and
  per-batch seconds for small batches (where in-process could win);
- the pathological batch (``--pathological`` responses: power towers, deep nesting, huge
  repetitions; most run into the per-response limit): seconds serial without a batch budget
  (what one training step waited before the pool) vs the pool with ``--batch-timeout``, and the
  statuses it returned.

Usage::

    python benchmarks/bench_reward.py                       # defaults: 5 s per response, 256 normal, 16 pathological
    python benchmarks/bench_reward.py --timeout 1 --batch-timeout 3 --normal 64

Timings are wall-clock seconds on this machine and noisy when other jobs share its cores.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from collections import Counter
from pathlib import Path

from lite_ppo.rewards import MathVerifyReward
from lite_ppo.rewards.math_verify_reward import available_cores

REPO = Path(__file__).resolve().parents[1]


def pathological_responses(count: int) -> list[str]:
    """Responses that make sympy/math-verify work for seconds to forever (power towers, factorials
    of huge numbers, 200-deep fractions, 300-deep roots, 3,000-term sums and brace nests)."""
    kinds = [
        "\\boxed{9^{9^{9^{9^{9}}}}}",
        "\\boxed{(10^{100})!}",
        "\\boxed{7^{7^{7}}!}",
        "\\boxed{8^{8^{8^{8}}}}",
        "\\boxed{" + "\\frac{1}{" * 200 + "2" + "}" * 200 + "}",
        "\\boxed{" + "\\sqrt{" * 300 + "2" + "}" * 300 + "}",
        "\\boxed{" + "+".join(["x"] * 3000) + "}",
        "\\boxed{" + "{" * 3000 + "1" + "}" * 3000 + "}",
        "The answer is \\[" + "1+" * 5000 + "1\\]",
    ]
    return [kinds[i % len(kinds)] for i in range(count)]


def normal_responses(count: int, data_dir: Path) -> tuple[list[str], list[str], str]:
    rows = []
    for name in ("medium.jsonl", "hard.jsonl", "easy.jsonl"):
        path = data_dir / name
        if path.exists():
            rows += [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
    rows = [r for r in rows if "\\boxed" in r.get("solution", "")]
    if rows:
        picked = [rows[i % len(rows)] for i in range(count)]
        return (
            [r["solution"] for r in picked],
            [r["answer"] for r in picked],
            f"MATH reference solutions from {data_dir}",
        )
    responses = [
        f"We add the numbers step by step: ${i} + {2 * i} = {3 * i}$. Then we halve it, "
        f"$\\frac{{{3 * i}}}{{2}}$, and check the units. So the answer is \\boxed{{\\frac{{{3 * i}}}{{2}}}}."
        for i in range(count)
    ]
    return responses, [f"{3 * i}/2" for i in range(count)], "synthetic worked answers"


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def workers_cpu(reward: MathVerifyReward) -> float:
    """CPU seconds used so far by the reward's worker processes (Linux /proc)."""
    total = 0.0
    for pid in reward._pool.worker_pids():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--timeout", type=float, default=5.0, help="per-response budget (timeout_seconds)")
    p.add_argument("--batch-timeout", type=float, default=10.0, help="per-batch budget of the pool run")
    p.add_argument("--workers", type=int, default=None, help="pool size (default: available cores)")
    p.add_argument("--normal", type=int, default=256)
    p.add_argument("--pathological", type=int, default=16)
    p.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data" / "train")
    p.add_argument(
        "--skip-serial-pathological", action="store_true", help="skip the slow serial run (pathological x timeout s)"
    )
    args = p.parse_args(argv)
    workers = args.workers if args.workers is not None else available_cores()
    print(f"cores available: {available_cores()}, pool workers: {workers}, per-response budget {args.timeout} s")

    single = MathVerifyReward(timeout_seconds=args.timeout, workers=1)
    one_start, _ = timed(single.start)
    single.close()
    pool = MathVerifyReward(timeout_seconds=args.timeout, batch_timeout_seconds=None, workers=workers)
    pool_start, _ = timed(pool.start)
    print(f"worker start-up: 1 worker {one_start:.2f} s; {workers} workers {pool_start:.2f} s")

    serial = MathVerifyReward(timeout_seconds=args.timeout, batch_timeout_seconds=None, workers=0)
    responses, golds, source = normal_responses(args.normal, args.data_dir)
    serial.score_batch(responses[:4], golds[:4])  # warm the in-process caches as the workers are
    cpu_serial = own_cpu()
    t_serial, r_serial = timed(lambda: serial.score_batch(responses, golds))
    cpu_serial = own_cpu() - cpu_serial
    cpu_parent, cpu_workers = own_cpu(), workers_cpu(pool)
    t_pool, r_pool = timed(lambda: pool.score_batch(responses, golds))
    cpu_parent, cpu_workers = own_cpu() - cpu_parent, workers_cpu(pool) - cpu_workers
    assert [r.status for r in r_serial] == [r.status for r in r_pool], "serial and pool disagree"
    print(f"\nnormal batch: {len(responses)} {source}; statuses {dict(Counter(r.status for r in r_pool))}")
    print(
        f"  serial {t_serial:.2f} s ({1000 * t_serial / len(responses):.1f} ms/response)   pool {t_pool:.2f} s   "
        f"speed-up x{t_serial / t_pool:.2f}"
    )
    print(
        f"  CPU seconds: serial {cpu_serial:.2f}; pool {cpu_workers:.2f} "
        f"in the workers + {cpu_parent:.2f} in the caller"
    )
    print("  small batches (median of 5 runs, warm pool): size  serial_s  pool_s")
    for size in (1, 2, 4, 8, 16, 32):
        if size > len(responses):
            break
        s = statistics.median(
            timed(lambda size=size: serial.score_batch(responses[:size], golds[:size]))[0] for _ in range(5)
        )
        q = statistics.median(
            timed(lambda size=size: pool.score_batch(responses[:size], golds[:size]))[0] for _ in range(5)
        )
        print(f"  {size:>4}  {s:8.4f}  {q:7.4f}")

    bad = pathological_responses(args.pathological)
    bad_golds = ["2"] * len(bad)
    print(f"\npathological batch: {len(bad)} responses (per-response limit {args.timeout} s)")
    if not args.skip_serial_pathological:
        t, res = timed(lambda: serial.score_batch(bad, bad_golds))
        print(f"  serial, no batch budget   {t:7.2f} s   {dict(Counter(r.status for r in res))}")
    t, res = timed(lambda: pool.score_batch(bad, bad_golds))
    print(f"  pool, no batch budget     {t:7.2f} s   {dict(Counter(r.status for r in res))}")
    budgeted = MathVerifyReward(timeout_seconds=args.timeout, batch_timeout_seconds=args.batch_timeout, workers=workers)
    budgeted.start()
    t, res = timed(lambda: budgeted.score_batch(bad, bad_golds))
    print(f"  pool, batch budget {args.batch_timeout:g} s  {t:7.2f} s   {dict(Counter(r.status for r in res))}")
    t, _ = timed(budgeted.start)
    print(f"  workers ready again for the next batch after: {t:.2f} s")
    for reward in (pool, budgeted):
        reward.close()


if __name__ == "__main__":
    main()
