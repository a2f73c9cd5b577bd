"""configs/engines/*.yaml compose after a recipe and a model file and build the right engine
(instantiation only: no engine is started, so this runs without vLLM's runtime)."""

from __future__ import annotations

import pytest

from helpers.paths import REPO
from lite_ppo.callbacks import Rollout
from lite_ppo.cli.lightning_cli import TRAINER_DEFAULTS, LitePPOCLI
from lite_ppo.data.datamodule import MathDataModule
from lite_ppo.rollout import HFEngine, VLLMEngine
from lite_ppo.training.module import LitePPO


def _engine(*configs: str, extra: tuple[str, ...] = ()):
    args = []
    for config in configs:
        args += ["--config", str(REPO / "configs" / config)]
    cli = LitePPOCLI(
        LitePPO, MathDataModule, args=[*args, *extra], run=False, trainer_defaults={**TRAINER_DEFAULTS, "logger": False}
    )
    rollouts = [cb for cb in cli.trainer.callbacks if isinstance(cb, Rollout)]
    assert len(rollouts) == 1
    return rollouts[0].engine


def test_vllm_cpu_config():
    engine = _engine("recipes/lite_ppo.yaml", "models/tiny.yaml", "engines/vllm_cpu.yaml")
    assert isinstance(engine, VLLMEngine)
    # float32 like the trainer (drift at kernel noise), eager, a CPU KV cache, trainer log-probs
    assert (engine.dtype, engine.enforce_eager, engine.kv_cache_space_gib) == ("float32", True, 1.0)
    assert (engine.logprobs_mode, engine.return_logprobs, engine.enable_sleep_mode, engine.tensor_parallel_size) == (
        "trainer",
        True,
        False,
        1,
    )
    assert engine.llm is None  # built lazily at the first rollout


def test_vllm_gpu_config():
    engine = _engine("recipes/lite_ppo.yaml", "models/tiny.yaml", "engines/vllm_gpu.yaml")
    assert isinstance(engine, VLLMEngine)
    assert (engine.dtype, engine.enforce_eager, engine.gpu_memory_utilization, engine.enable_sleep_mode) == (
        "bfloat16",
        False,
        0.5,
        True,
    )
    assert engine.tensor_parallel_size == 1 and engine.kv_cache_space_gib is None


@pytest.mark.parametrize("order", ["engine_last", "engine_then_model"])
def test_hf_config_and_switching_back(order):
    configs = ["recipes/lite_ppo.yaml", "engines/vllm_cpu.yaml", "engines/hf.yaml"]
    engine = (
        _engine(*configs, "models/tiny.yaml")
        if order == "engine_then_model"
        else _engine("recipes/lite_ppo.yaml", "models/tiny.yaml", "engines/hf.yaml")
    )
    assert isinstance(engine, HFEngine)
    # the model file's own engine line (HFEngine, batch_size 8) wins when it comes last
    assert engine.batch_size == (8 if order == "engine_then_model" else 16)


def test_hf_config_replaces_a_vllm_engine():
    engine = _engine("recipes/lite_ppo.yaml", "models/tiny.yaml", "engines/vllm_cpu.yaml", "engines/hf.yaml")
    assert isinstance(engine, HFEngine) and engine.batch_size == 16  # hf.yaml's own value, vLLM's fields dropped


def test_vllm_gpu_config_keeps_the_model_files_engine_limits(capsys):
    """configs/engines/vllm_gpu.yaml composes after a Qwen3 model file without undoing its
    gpu_memory_utilization and max_model_len (parsed only: the model needs GPUs)."""
    import yaml

    from lite_ppo.cli import main

    with pytest.raises(SystemExit):
        main(
            [
                "fit",
                "--config",
                str(REPO / "configs/recipes/lite_ppo.yaml"),
                "--config",
                str(REPO / "configs/models/qwen3_4b_base.yaml"),
                "--config",
                str(REPO / "configs/engines/vllm_gpu.yaml"),
                "--print_config",
            ]
        )
    engine = yaml.safe_load(capsys.readouterr().out)["rollout"]["engine"]["init_args"]
    assert (engine["gpu_memory_utilization"], engine["max_model_len"]) == (0.4, 10240)  # the model file's
    assert (engine["enable_sleep_mode"], engine["enforce_eager"], engine["dtype"]) == (
        True,
        False,
        "bfloat16",
    )  # the engine file's


def test_engine_fields_override_from_the_command_line():
    engine = _engine(
        "recipes/lite_ppo.yaml",
        "models/tiny.yaml",
        "engines/vllm_cpu.yaml",
        extra=("--rollout.engine.init_args.kv_cache_space_gib=0.5", "--rollout.engine.init_args.dtype=bfloat16"),
    )
    assert (engine.kv_cache_space_gib, engine.dtype) == (0.5, "bfloat16")


def test_batched_config_and_the_testbeds_default():
    from lite_ppo.rollout import BatchedEngine

    engine = _engine("recipes/lite_ppo.yaml", "models/tiny.yaml", "engines/batched.yaml")
    assert isinstance(engine, BatchedEngine) and engine.max_sequences == 1024 and engine.return_logprobs
    testbed = _engine("recipes/lite_ppo.yaml", "models/testbed_base.yaml")
    assert isinstance(testbed, BatchedEngine)
    back = _engine("recipes/lite_ppo.yaml", "models/testbed_base.yaml", "engines/hf.yaml")
    assert isinstance(back, HFEngine) and back.batch_size == 16  # the portable engine stays one file away
