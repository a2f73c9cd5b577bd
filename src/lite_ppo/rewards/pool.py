"""A pool of reward worker processes with a per-call and a per-batch time budget.

Why not ``concurrent.futures.ProcessPoolExecutor``: it can neither stop one task that runs too
long nor replace the process running it, and its ``fork`` default is unsafe in a trainer that
already runs torch and vLLM threads. Here each worker is a fresh interpreter
(:mod:`lite_ppo.rewards.worker`, about half a second to start) talking over its own pair of pipes,
so the pool can:

- give each response at most ``call_seconds``: the worker's own alarm stops the scoring, and a
  worker still silent ``KILL_GRACE_SECONDS`` later (stuck in C code, frozen) is killed and
  replaced; the response gets status ``timeout``;
- give each batch at most ``batch_seconds``: when it runs out, the running calls are interrupted
  (SIGUSR1; a worker that does not answer within ``KILL_GRACE_SECONDS`` is killed and replaced),
  and every response not scored by then gets status ``batch_timeout``;
- replace a worker that dies (status ``error`` for its response).

All of it works from any thread: the budgets are deadlines on the waiting side, not signals.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
import weakref
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

from lite_ppo.rewards.scoring import BATCH_TIMEOUT, ERROR, TIMEOUT, RewardResult

# A worker whose own alarm did not end an over-long call this much later is killed.
KILL_GRACE_SECONDS = 1.0
# Responses handed to one worker at a time (the running one and the next ones).
QUEUE_DEPTH = 2
# A pool whose workers are not all ready this long after starting is broken.
START_TIMEOUT_SECONDS = 120.0
# Workers that die before they are ready this many times in a row: give up (bad environment).
MAX_FAILED_STARTS = 3

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder that holds lite_ppo/


@dataclass(eq=False)
class _Worker:
    process: subprocess.Popen
    inbox: Connection  # the pool writes tasks here
    outbox: Connection  # the pool reads results here
    ready: bool = False
    queue: collections.deque = field(default_factory=collections.deque)  # batch indices sent, unanswered
    deadline: float = float("inf")  # for the first of them, the one running

    @property
    def busy(self) -> bool:
        return bool(self.queue)

    def kill(self) -> None:
        for conn in (self.inbox, self.outbox):
            conn.close()
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # unkillable (uninterruptible I/O): leave it to the OS
            pass


@dataclass(eq=False)
class _Workers:
    """The live workers; kept apart from the pool so that the exit hook does not keep it alive."""

    items: list[_Worker] = field(default_factory=list)

    def close(self) -> None:
        for worker in self.items:
            try:
                worker.inbox.send(None)  # a polite stop; kill below if it does not stop at once
            except OSError:
                pass
        for worker in self.items:
            try:
                worker.process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
            worker.kill()
        self.items.clear()


class ScoringPool:
    """``size`` reward workers scoring with ``require_boxed`` within ``call_seconds`` per response.

    Workers start on first use and are reused; :meth:`close` (or interpreter exit) stops them.
    Not thread-safe: the owner serialises calls (``MathVerifyReward`` holds a lock).

    Example::

        pool = ScoringPool(size=2, call_seconds=5.0, require_boxed=False)
        pool.score(["\\\\boxed{1}", "\\\\boxed{2}"], ["1", "1"], batch_seconds=60.0)  # correct, wrong
        pool.close()
    """

    def __init__(self, size: int, call_seconds: float, require_boxed: bool) -> None:
        if size < 1:
            raise ValueError(f"ScoringPool needs at least one worker, got {size}")
        self.size = size
        self.call_seconds = call_seconds
        self.require_boxed = require_boxed
        self._workers = _Workers()
        self._failed_starts = 0
        self._finalizer = weakref.finalize(self, self._workers.close)

    # -- workers -----------------------------------------------------------------------------------
    def _spawn(self) -> _Worker:
        task_read, task_write = os.pipe()
        result_read, result_write = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        args = [str(task_read), str(result_write), repr(self.call_seconds), "1" if self.require_boxed else "0"]
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "lite_ppo.rewards.worker", *args],
                pass_fds=(task_read, result_write),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            os.close(task_read)
            os.close(result_write)
        worker = _Worker(process, Connection(task_write, readable=False), Connection(result_read, writable=False))
        self._workers.items.append(worker)
        return worker

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self._workers.items.remove(worker)
        self._spawn()

    def _fill(self) -> None:
        while len(self._workers.items) < self.size:
            self._spawn()

    def start(self) -> float:
        """Start the missing workers and wait until all are ready; returns the seconds it took."""
        begin = time.monotonic()
        self._fill()
        deadline = begin + START_TIMEOUT_SECONDS
        while not all(w.ready for w in self._workers.items):
            if time.monotonic() > deadline:
                raise RuntimeError(f"reward workers not ready after {START_TIMEOUT_SECONDS:.0f} s")
            waiting = [w.outbox for w in self._workers.items if not w.ready]
            for conn in wait(waiting, timeout=max(0.0, deadline - time.monotonic())):
                self._receive(self._owner(conn), results=None)
        return time.monotonic() - begin

    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._workers.items]

    def close(self) -> None:
        self._finalizer()

    def _owner(self, conn: Connection) -> _Worker:
        return next(w for w in self._workers.items if w.outbox is conn)

    def _receive(
        self, worker: _Worker, results: list[RewardResult | None] | None, pending: collections.deque | None = None
    ) -> object:
        """Handle one message (or the death) of ``worker``; returns the message (None: it died).

        A dead worker's running response gets status ``error`` and its queued ones go back to
        ``pending`` (when given)."""
        try:
            message = worker.outbox.recv()
        except (EOFError, OSError):  # the worker died (crash, out of memory, killed from outside)
            if not worker.ready:
                self._failed_starts += 1
                if self._failed_starts >= MAX_FAILED_STARTS:
                    code = worker.process.wait()
                    raise RuntimeError(
                        f"reward workers die on start (exit code {code}); see the messages above"
                    ) from None
            if worker.queue and results is not None:
                results[worker.queue.popleft()] = RewardResult(0.0, ERROR)
            if pending is not None:
                pending.extendleft(reversed(worker.queue))
            self._replace(worker)
            return None
        if message[0] == "ready":
            worker.ready = True
            self._failed_starts = 0
        elif message[0] != "fenced" and worker.queue and worker.queue[0] == message[0]:
            index, score, status, extracted = message
            worker.queue.popleft()
            if results is not None:
                results[index] = RewardResult(score, status, extracted)
            # The worker moves on to its next queued response now.
            worker.deadline = (
                time.monotonic() + self.call_seconds + KILL_GRACE_SECONDS if worker.queue else float("inf")
            )
        return message

    # -- scoring -----------------------------------------------------------------------------------
    def score(self, responses: list[str], golds: list[str], batch_seconds: float | None) -> list[RewardResult]:
        """Score a batch within ``batch_seconds`` (None: no batch budget). The budget starts once
        the workers are ready (start-up is not scoring time; see :meth:`start`).

        Each worker holds up to ``QUEUE_DEPTH`` responses, so that it never waits for this process
        to wake up between two of them; its per-response deadline runs from the moment it starts
        one (the answer to the previous one)."""
        results: list[RewardResult | None] = [None] * len(responses)
        if not responses:
            return []
        self.start()
        batch_deadline = time.monotonic() + batch_seconds if batch_seconds is not None else float("inf")
        pending = collections.deque(range(len(responses)))
        while True:
            for worker in list(self._workers.items):
                while pending and worker.ready and len(worker.queue) < QUEUE_DEPTH:
                    index = pending.popleft()
                    try:
                        worker.inbox.send((index, responses[index], golds[index]))
                    except OSError:  # it died: its responses go to the other workers
                        pending.appendleft(index)
                        pending.extendleft(reversed(worker.queue))
                        self._replace(worker)
                        break
                    if not worker.queue:
                        worker.deadline = time.monotonic() + self.call_seconds + KILL_GRACE_SECONDS
                    worker.queue.append(index)
            busy = [w for w in self._workers.items if w.busy]
            if not pending and not busy:
                break
            now = time.monotonic()
            if now >= batch_deadline:
                break
            next_deadline = min([batch_deadline] + [w.deadline for w in busy])
            listening = [w.outbox for w in self._workers.items if w.busy or not w.ready]
            for conn in wait(listening, timeout=max(0.0, next_deadline - now)):
                self._receive(self._owner(conn), results, pending)
            now = time.monotonic()
            for worker in [w for w in self._workers.items if w.busy and now >= w.deadline]:
                results[worker.queue.popleft()] = RewardResult(0.0, TIMEOUT)  # stuck past its own alarm
                pending.extendleft(reversed(worker.queue))
                self._replace(worker)
        self._abort_running()
        return [r if r is not None else RewardResult(0.0, BATCH_TIMEOUT) for r in results]

    def _abort_running(self) -> None:
        """The batch budget ran out: SIGUSR1 makes each busy worker end its running call and skip
        its queued responses up to a fence message, which it answers; it then serves the next batch.
        Workers that do not answer within ``KILL_GRACE_SECONDS`` are killed and replaced. Their
        responses keep no result (status ``batch_timeout``)."""
        busy = [w for w in self._workers.items if w.busy]
        for worker in busy:
            try:
                worker.process.send_signal(signal.SIGUSR1)
                worker.inbox.send(("fence",))
            except OSError:
                pass
        deadline = time.monotonic() + KILL_GRACE_SECONDS
        while busy and time.monotonic() < deadline:
            for conn in wait([w.outbox for w in busy], timeout=max(0.0, deadline - time.monotonic())):
                worker = self._owner(conn)
                message = self._receive(worker, results=None)  # results of the aborted batch are dropped
                if message is not None and message[0] == "fenced":
                    worker.queue.clear()
                    worker.deadline = float("inf")
            busy = [w for w in busy if w.busy and w in self._workers.items]
        for worker in busy:
            self._replace(worker)
