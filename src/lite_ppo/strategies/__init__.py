"""Distributed training pieces: the CPU DeepSpeed strategy for tests and the ZeRO-3 helpers.

- :class:`CPUDeepSpeedStrategy`: Lightning's ``DeepSpeedStrategy`` on the CPU (gloo). Tests only.
- :mod:`lite_ppo.strategies.zero`: what the module does differently under DeepSpeed.

The bucketed gather of a ZeRO-3 model's full weights (the vLLM weight sync) is
:mod:`lite_ppo.weight_gather`: it needs no Lightning, so the rollout engines import it from there.

GPU presets: ``configs/strategies/zero3.yaml`` and ``zero3_offload.yaml``.
"""

from lite_ppo.strategies.cpu_deepspeed import CPUDeepSpeedStrategy

__all__ = ["CPUDeepSpeedStrategy"]
