"""A DeepSpeed strategy that runs on the CPU: for tests and CI only, never for training.

Lightning 2.6's :class:`~lightning.pytorch.strategies.DeepSpeedStrategy` refuses every accelerator
but CUDA in ``setup_environment``. DeepSpeed itself runs ZeRO (stage 3 included) on its CPU
accelerator with the gloo backend, which is what lets the ZeRO-3 code paths (partitioned
parameters, sharded checkpoints, gathered weight sync) be tested on a machine without a GPU.
"""

from __future__ import annotations

from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy, StrategyRegistry


class CPUDeepSpeedStrategy(DeepSpeedStrategy):
    """Lightning's ``DeepSpeedStrategy`` minus its "accelerator must be CUDA" check. TEST PATH ONLY.

    Not a production path: on the CPU DeepSpeed's ZeRO-3 is slow, uses gloo, and has no fused
    optimizers; it exists so that tests and CI exercise exactly the code that runs on GPUs. Everything
    else (config, ZeRO stages, checkpointing, precision) is the parent class unchanged. Use
    ``configs/strategies/zero3.yaml`` (plain ``DeepSpeedStrategy``) on GPUs.

    Set ``DS_ACCELERATOR=cpu`` when a GPU is visible but the test should still run on the CPU.

    Example (YAML, as in ``configs/strategies/zero3_cpu_test.yaml``)::

        trainer:
          accelerator: cpu
          devices: 2
          strategy:
            class_path: lite_ppo.strategies.CPUDeepSpeedStrategy
            init_args: {stage: 3}

    or ``Trainer(strategy="deepspeed_stage_3_cpu_test", accelerator="cpu", devices=2)`` once
    ``lite_ppo.strategies`` is imported.
    """

    strategy_name = "deepspeed_cpu_test"

    def setup_environment(self) -> None:
        # DeepSpeedStrategy.setup_environment = CUDA check + DDPStrategy.setup_environment; skip the check only.
        DDPStrategy.setup_environment(self)

    @classmethod
    def register_strategies(cls, strategy_registry: StrategyRegistry) -> None:  # type: ignore[override]
        strategy_registry.register(
            "deepspeed_stage_3_cpu_test", cls, description="DeepSpeed ZeRO-3 on the CPU with gloo (tests only)", stage=3, override=True
        )


CPUDeepSpeedStrategy.register_strategies(StrategyRegistry)
