"""Evaluation on math benchmarks (MATH-500, AIME24/25, AMC23, MinervaMath, OlympiadBench, GSM8K).

- :mod:`~lite_ppo.evaluation.benchmarks`: the benchmark registry and YAML config, file loading.
- :mod:`~lite_ppo.evaluation.metrics`: ``EvalMetric`` (torchmetrics; accuracy, mean@n, unbiased
  pass@k, length, truncation, parse failures), averages over benchmarks.
- :mod:`~lite_ppo.evaluation.results`: rollout batches -> metrics and per-response records.
- :mod:`~lite_ppo.evaluation.runner`: load a model / checkpoint and evaluate it outside Lightning.
- :mod:`~lite_ppo.evaluation.report`: metrics.json, metrics.md, responses.jsonl, console tables.
- :mod:`~lite_ppo.evaluation.command`: ``lite-ppo evaluate``.

During training the ``lite_ppo.callbacks.Evaluation`` callback runs the same code inside
Lightning validation.
"""

# Lazy, so that importing the metrics (e.g. in a DDP worker) does not pull in Lightning.
_EXPORTS = {
    "DEFAULT_BENCHMARKS": "benchmarks",
    "BenchmarkSpec": "benchmarks",
    "apply_limit": "benchmarks",
    "load_benchmark": "benchmarks",
    "load_benchmark_config": "benchmarks",
    "load_benchmarks": "benchmarks",
    "resolve_data_dir": "benchmarks",
    "EvalMetric": "metrics",
    "average_metrics": "metrics",
    "default_ks": "metrics",
    "pass_at_k": "metrics",
    "status_indices": "metrics",
    "GroupMetrics": "results",
    "response_records": "results",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"lite_ppo.evaluation.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'lite_ppo.evaluation' has no attribute {name!r}")


__all__ = [
    "DEFAULT_BENCHMARKS",
    "BenchmarkSpec",
    "EvalMetric",
    "GroupMetrics",
    "apply_limit",
    "average_metrics",
    "default_ks",
    "load_benchmark",
    "load_benchmark_config",
    "load_benchmarks",
    "pass_at_k",
    "resolve_data_dir",
    "response_records",
    "status_indices",
]
