"""Distributed training pieces: what data parallelism and DeepSpeed ZeRO-3 need beside Lightning.

- :mod:`lite_ppo.strategies.ranks`: reductions over the data-parallel ranks (techniques use it).
- :mod:`lite_ppo.strategies.zero`: what the module does differently under DeepSpeed.
- :mod:`lite_ppo.strategies.weight_gather`: the bucketed gather of a ZeRO-3 model's full weights (the
  vLLM weight sync); it needs no Lightning, so the rollout engines import it.
- :class:`CPUDeepSpeedStrategy`: Lightning's ``DeepSpeedStrategy`` on the CPU (gloo). Tests only.

GPU presets: ``configs/strategies/zero3.yaml`` and ``zero3_offload.yaml``.
"""

__all__ = ["CPUDeepSpeedStrategy"]


def __getattr__(name: str):
    # Lazy: importing ranks or weight_gather must not import DeepSpeed and Lightning's strategy.
    if name == "CPUDeepSpeedStrategy":
        from lite_ppo.strategies.cpu_deepspeed import CPUDeepSpeedStrategy

        return CPUDeepSpeedStrategy
    raise AttributeError(f"module 'lite_ppo.strategies' has no attribute {name!r}")
