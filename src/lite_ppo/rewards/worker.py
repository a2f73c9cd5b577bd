"""A reward worker process: ``python -m lite_ppo.rewards.worker READ_FD WRITE_FD SECONDS BOXED``.

Started by :class:`lite_ppo.rewards.pool.ScoringPool` as a fresh interpreter (never a fork of the
trainer, whose torch and vLLM threads make forking unsafe). It reads ``(task_id, response, gold)``
from READ_FD, scores the response within SECONDS (its own main thread, so the alarm works) and
writes ``(task_id, score, status, extracted)`` to WRITE_FD; ``("ready", pid)`` once at start.
SIGUSR1 ends the running call early (status ``timeout``; the pool drops that result) and skips the
tasks up to the next ``("fence",)``, answered with ``("fenced",)``. It exits when READ_FD closes. A
worker that overruns anyway is killed by the pool.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import warnings
from multiprocessing.connection import Connection


def main(argv: list[str]) -> int:
    read_fd, write_fd, seconds, boxed = int(argv[0]), int(argv[1]), float(argv[2]), argv[3] == "1"
    # Ctrl-C in the terminal reaches the whole process group: the trainer handles it and closes us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    warnings.simplefilter("ignore")
    logging.basicConfig(level=logging.ERROR)
    from lite_ppo.rewards.scoring import CallTimeout, score_within

    # SIGUSR1: the pool's batch budget ran out. End the running call (as a time-out) and skip the
    # queued responses up to the pool's fence message; then serve the next batch.
    scoring = aborting = False

    def on_abort(signum, frame):
        nonlocal aborting
        aborting = True
        if scoring:
            raise CallTimeout

    signal.signal(signal.SIGUSR1, on_abort)

    sys.set_int_max_str_digits(0)  # see scoring.unlimited_int_digits; this process only scores
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    score_within("\\boxed{1}", "1", boxed, seconds)  # warm-up: regex compilation, sympy caches
    outbox.send(("ready", os.getpid()))
    while True:
        try:
            task = inbox.recv()
        except (EOFError, OSError):
            return 0
        if task is None:
            return 0
        if task[0] == "fence":
            aborting = False
            outbox.send(("fenced",))
            continue
        if aborting:
            continue
        task_id, response, gold = task
        scoring = True
        try:
            result = score_within(response, gold, boxed, seconds)
        finally:
            scoring = False
        outbox.send((task_id, result.score, result.status, result.extracted))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
