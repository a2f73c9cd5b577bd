"""Evaluate a policy on benchmarks outside Lightning: load a model, generate, score, collect.

Generation and scoring go through :class:`~lite_ppo.rollout.producer.RolloutProducer` (the
training path: the same prompt formatter, engine and ``MathVerifyReward``); metrics through
:class:`GroupMetrics`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lite_ppo.data.problem import Problem
from lite_ppo.errors import MissingFileError, UserError
from lite_ppo.evaluation.benchmarks import BenchmarkSpec
from lite_ppo.evaluation.results import GroupMetrics, response_records
from lite_ppo.rollout.engine import SamplingConfig

if TYPE_CHECKING:  # type hints only: the producer pulls in the engines
    from lite_ppo.rollout.producer import RolloutProducer


def load_policy_module(model: str, base_model: str | None = None, dtype: str = "float32"):
    """A ``LitePPO`` module holding the policy to evaluate.

    Args:
        model: a local HF folder, ``builtin:<name>``, or a Lightning checkpoint saved by
            ``lite-ppo fit`` (a ``*.ckpt`` file, or a DeepSpeed checkpoint folder): its ``policy.*``
            weights are loaded into the model its hyper-parameters name (``model_path``).
        base_model: for a checkpoint, the model folder / builtin that gives the architecture and
            tokenizer, when the one recorded in the checkpoint moved.
        dtype: the dtype the policy is loaded in (``float32``, ``bfloat16``, ``float16``).

    Example:
        >>> module = load_policy_module("builtin:tiny")  # doctest: +SKIP
    """
    from lite_ppo.checkpoints.reader import is_deepspeed_checkpoint, read_checkpoint
    from lite_ppo.models.adapter_checkpoint import BASE_KEY, with_base_weights
    from lite_ppo.models.loading import load_weights
    from lite_ppo.training.module import LitePPO

    path = Path(os.path.expanduser(model))
    if (path.is_file() and path.suffix == ".ckpt") or is_deepspeed_checkpoint(path):
        client, state = read_checkpoint(path, lazy=True)  # DeepSpeed: one consolidated tensor in memory at a time
        hparams = dict(client.get("hyper_parameters") or {})
        model_path = base_model or hparams.get("model_path")
        if not model_path:
            raise UserError(f"checkpoint {path} records no model_path; pass --base-model (the model it trained)")
        # A LoRA run's checkpoint holds the peft model's tensors: the same adapters are added first.
        module = LitePPO(model_path=model_path, torch_dtype=dtype, lora=hparams.get("lora"))
        module.configure_model()
        source = f"checkpoint {path}"
        if module.has_adapters:  # adapters-only checkpoints: the base from model_path, checked against its identity
            state = with_base_weights(module.policy, state, client.get(BASE_KEY), source)
        load_weights(module.policy, state, source=source, model_name=model_path)
        module.policy_version = int(client.get("policy_version", 0))
        return module
    if path.suffix == ".ckpt" and not path.exists():
        raise MissingFileError(f"checkpoint {str(path)!r} does not exist")
    module = LitePPO(model_path=model, torch_dtype=dtype)
    module.configure_model()
    return module


def evaluate_problems(
    module,
    producer: RolloutProducer,
    benchmarks: Sequence[tuple[BenchmarkSpec, list[Problem]]],
    sampling: SamplingConfig,
    batch_size: int = 16,
    seed: int = 0,
    ks: Sequence[int] | None = None,
    progress: bool = True,
    keep_prompts: bool = True,
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, dict[str, float]]]:
    """Generate ``sampling.n`` responses per problem, score them, and compute every metric.

    Args:
        module: the ``LitePPO`` module (``policy``, ``tokenizer``, ``model_path``).
        producer: generates and scores (its engine, prompt formatter and reward).
        benchmarks: ``(spec, problems)`` pairs.
        batch_size: problems per :meth:`RolloutProducer.produce` call.
        seed: sampling seed of the first batch (batch i of a benchmark uses ``seed + i``).

    Returns:
        ``(results, records, timing)``: results as :meth:`GroupMetrics.compute` returns them,
        one record per response (see :func:`response_records`), and per-benchmark
        ``{"wall_time_s", "generation_s", "response_tokens", "tokens_per_s"}`` plus
        ``timing["engine_setup"]["wall_time_s"]`` (engine start-up, not in any benchmark's time).
    """
    from tqdm.auto import tqdm

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    metrics = GroupMetrics(
        [s.name for s, _ in benchmarks],
        num_samples=sampling.n,
        ks=ks,
        averaged=[s.name for s, _ in benchmarks if s.in_average],
    )
    metrics.to(module.device)
    records: list[dict[str, Any]] = []
    total = sum(len(p) for _, p in benchmarks)
    # Start the engine now, so its start-up (vLLM loads and compiles at start) is not charged to the first benchmark.
    start = time.perf_counter()
    producer.prepare(module)
    timing: dict[str, dict[str, float]] = {"engine_setup": {"wall_time_s": time.perf_counter() - start}}
    bar = tqdm(total=total, unit="problem", desc="evaluate", disable=not progress, dynamic_ncols=True)
    # A batch can take minutes: the bar says what runs and its clock keeps ticking until the batch is done.
    ticking = _Ticker(bar) if progress and sys.stderr.isatty() else None  # not a line a second into a log
    try:
        for spec, problems in benchmarks:
            start = time.perf_counter()
            generation_s, tokens, correct, seen = 0.0, 0, 0, 0
            batches = -(-len(problems) // batch_size)
            for i in range(0, len(problems), batch_size):
                chunk = problems[i : i + batch_size]
                status = _BatchStatus(bar, f"{spec.display} batch {i // batch_size + 1}/{batches}")
                status.accuracy = f" acc={correct / seen:.3f}" if seen else ""
                producer.engine.on_tokens = status.add_tokens
                try:
                    batch, timings = producer.produce(
                        module, chunk, sampling, seed + i // batch_size, on_phase=status.show
                    )
                finally:
                    producer.engine.on_tokens = None
                prompts = [producer.prompt.format(p.problem, module.tokenizer) for p in chunk] if keep_prompts else None
                new = response_records(spec.name, chunk, batch, prompts)
                metrics.update_rollout(spec.name, chunk, batch)
                records.extend(new)
                generation_s += timings.get("generation_s", 0.0)
                tokens += int(batch.response_lengths.sum())
                correct += sum(r["correct"] for r in new)
                seen += len(new)
                bar.set_postfix_str(f"{spec.display} acc={correct / max(seen, 1):.3f}")
                bar.update(len(chunk))
            wall = time.perf_counter() - start
            timing[spec.name] = {
                "wall_time_s": wall,
                "generation_s": generation_s,
                "response_tokens": float(tokens),
                "tokens_per_s": tokens / generation_s if generation_s > 0 else 0.0,
            }
    finally:
        if ticking is not None:
            ticking.stop()
        bar.close()
    return metrics.compute(), records, timing


class _BatchStatus:
    """The bar's text while one batch runs: where it is, the phase, the tokens generated so far
    (the engine reports them as they come, so a bar at 0/N still shows progress) and the accuracy."""

    def __init__(self, bar, where: str) -> None:
        self.bar, self.where = bar, where
        self.phase, self.tokens, self.accuracy = "", 0, ""

    def show(self, phase: str) -> None:
        self.phase = phase
        self._draw(refresh=True)

    def add_tokens(self, count: int) -> None:
        self.tokens += count
        self._draw(refresh=False)  # the ticker redraws once a second; one redraw per decoding step is too many

    def _draw(self, refresh: bool) -> None:
        tokens = f" ({self.tokens:,} tokens)" if self.tokens else ""
        self.bar.set_postfix_str(f"{self.where}: {self.phase}{tokens}{self.accuracy}", refresh=refresh)


class _Ticker:
    """Redraws a tqdm bar every ``seconds`` from a daemon thread, so its elapsed time moves while one
    long call (a batch's generation) runs; tqdm only redraws when it is updated."""

    def __init__(self, bar, seconds: float = 1.0) -> None:
        import threading

        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(bar, seconds), daemon=True)
        self._thread.start()

    def _run(self, bar, seconds: float) -> None:
        while not self._done.wait(seconds):
            bar.refresh()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def evaluate_and_report(
    module,
    producer: RolloutProducer,
    benchmarks: Sequence[tuple[BenchmarkSpec, list[Problem]]],
    sampling: SamplingConfig,
    out: str | os.PathLike[str],
    info: dict[str, Any],
    title: Callable[[float], str],
    **evaluate_kwargs: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``lite-ppo evaluate`` and ``lite-ppo test`` after the policy loaded: evaluate ``benchmarks``
    (:func:`evaluate_problems` with ``evaluate_kwargs``; the producer is closed afterwards), write
    ``metrics.json``, ``metrics.md`` and ``responses.jsonl`` into ``out``, print the table titled
    ``title(wall seconds)``. Returns the results and ``info`` with the wall time and timings added."""
    from lite_ppo.evaluation.report import text_table, write_report

    start = time.perf_counter()
    try:
        results, records, timing = evaluate_problems(module, producer, benchmarks, sampling, **evaluate_kwargs)
    finally:
        producer.close()
    info = {**info, "wall_time_s": time.perf_counter() - start, "timing": timing}
    titles = {spec.name: spec.display for spec, _ in benchmarks}
    write_report(out, results, titles, info, records)
    print(text_table(results, titles, title=title(info["wall_time_s"]), greedy=sampling.greedy), flush=True)
    print(f"wrote {Path(out) / 'metrics.json'}, metrics.md, responses.jsonl", flush=True)
    return results, info
