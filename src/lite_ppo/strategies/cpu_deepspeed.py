"""A DeepSpeed strategy that runs on the CPU: for tests and CI only, never for training.

Lightning 2.6's :class:`~lightning.pytorch.strategies.DeepSpeedStrategy` refuses every accelerator
but CUDA in ``setup_environment``. DeepSpeed itself runs ZeRO (stage 3 included) on its CPU
accelerator with the gloo backend, which is what lets the ZeRO-3 code paths (partitioned
parameters, sharded checkpoints, gathered weight sync) be tested on a machine without a GPU.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from lightning.fabric.utilities.seed import reset_seed
from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy, StrategyRegistry


class CPUDeepSpeedStrategy(DeepSpeedStrategy):
    """Lightning's ``DeepSpeedStrategy`` minus its "accelerator must be CUDA" restriction. TEST PATH ONLY.

    The restriction has three parts, all lifted here and nothing else: ``setup_environment`` refuses
    a non-CUDA accelerator; ``setup_distributed`` requires device indices equal to the local ranks;
    ``deepspeed.initialize`` gets the device index as its device rank (CPU devices have no index,
    so the local rank stands in for it during that call).

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
            init_args: {stage: 3, logging_batch_size_per_gpu: 1}

    or ``Trainer(strategy="deepspeed_stage_3_cpu_test", accelerator="cpu", devices=2)`` once
    ``lite_ppo.strategies`` is imported. ``logging_batch_size_per_gpu`` (DeepSpeed's throughput-log
    batch size) must be given: Lightning's automatic choice reads ``batch_sampler.batch_size`` of the
    train loader, which the project's whole-batch loader does not have. The test preset also
    partitions even small tensors (see the YAML).
    """

    def setup_environment(self) -> None:
        # DeepSpeedStrategy.setup_environment = "accelerator must be CUDA" + DDPStrategy.setup_environment.
        DDPStrategy.setup_environment(self)

    def setup_distributed(self) -> None:
        # DeepSpeedStrategy.setup_distributed minus `_validate_device_index_selection`, the second part
        # of the CUDA restriction: it requires GPU indices equal to local ranks, and CPU devices have none.
        reset_seed()
        self.set_world_ranks()
        self._init_deepspeed_distributed()

    def _setup_model_and_optimizer(self, *args, **kwargs):
        with self._device_rank_for_deepspeed():
            return super()._setup_model_and_optimizer(*args, **kwargs)

    def _initialize_deepspeed_inference(self, model) -> None:
        with self._device_rank_for_deepspeed():
            super()._initialize_deepspeed_inference(model)

    @contextmanager
    def _device_rank_for_deepspeed(self):
        # Lightning hands deepspeed.initialize `device_rank=self.root_device.index`, the CUDA index
        # (= local rank); a CPU device has index None, which DeepSpeed cannot compare. For the call
        # only, the root device carries the local rank as its index (tensors on "cpu:N" live on the CPU).
        devices = self.parallel_devices
        if devices is None or devices[self.local_rank].type != "cpu":
            yield
            return
        saved = devices[self.local_rank]
        devices[self.local_rank] = torch.device("cpu", self.local_rank)
        try:
            yield
        finally:
            devices[self.local_rank] = saved

    @classmethod
    def register_strategies(cls, strategy_registry: StrategyRegistry) -> None:  # type: ignore[override]
        strategy_registry.register(
            "deepspeed_stage_3_cpu_test",
            cls,
            description="DeepSpeed ZeRO-3 on the CPU with gloo (tests only)",
            stage=3,
            logging_batch_size_per_gpu=1,
            override=True,
        )


CPUDeepSpeedStrategy.register_strategies(StrategyRegistry)
