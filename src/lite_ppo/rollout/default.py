"""Which engine a run uses when the config names none: chosen by measurement, per device."""

from __future__ import annotations

import importlib.util

from lite_ppo.rollout.engine import RolloutEngine


def default_engine() -> RolloutEngine:
    """vLLM when it is installed, else transformers ``generate``.

    vLLM generates about twice as fast as HF ``generate`` on SmolLM2-135M on a 2-core CPU
    (``benchmarks/bench_engines.py``; figures in docs/benchmarks.md, "Engines and weight sync").
    On CPU it runs in float32: bfloat16 was slower there and adds log-prob drift between engine and
    trainer. On GPUs vLLM picks its dtype; the GPU image without vLLM falls back to HF.
    """
    if importlib.util.find_spec("vllm") is not None:
        import torch

        from lite_ppo.rollout.vllm import VLLMEngine

        return VLLMEngine(dtype="auto" if torch.cuda.is_available() else "float32")
    from lite_ppo.rollout.hf import HFEngine

    return HFEngine()
