"""Distributed training pieces: the CPU DeepSpeed strategy for tests, ZeRO-3 helpers, bucketed gather.

- :class:`CPUDeepSpeedStrategy`: Lightning's ``DeepSpeedStrategy`` on the CPU (gloo). Tests only.
- :func:`iter_gathered_state`: ``(name, full tensor)`` of a ZeRO-3 model in bounded buckets (weight sync;
  defined in :mod:`lite_ppo.model_state`, which the rollout engines use too).
- :mod:`lite_ppo.strategies.zero`: what the module does differently under DeepSpeed.

GPU presets: ``configs/strategies/zero3.yaml`` and ``zero3_offload.yaml``.
"""

from lite_ppo.strategies.cpu_deepspeed import CPUDeepSpeedStrategy
from lite_ppo.model_state import GatherStats, iter_gathered_state

__all__ = ["CPUDeepSpeedStrategy", "GatherStats", "iter_gathered_state"]
