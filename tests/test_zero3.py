"""DeepSpeed ZeRO-3 on the CPU (2 gloo processes): exact semantics, the CLI end to end, bucketed gather.

- The fixed global batch of tests/test_distributed.py through ZeRO-3 (with activation checkpointing)
  gives the 1-process advantages, losses, gradient and weight updates (same tolerances).
- ``lite-ppo fit`` with configs/strategies/zero3_cpu_test.yaml: 3 training steps of the tiny model
  with HF-engine rollouts on partitioned parameters, TensorBoard scalars, sharded checkpoints;
  resume from the first checkpoint continues; ``lite-ppo export-hf`` writes a folder that
  transformers loads and generates with, equal to the gathered trained weights.
- :func:`lite_ppo.strategies.iter_gathered_state` never has more than ``bucket_bytes`` of
  parameters gathered (measured independently: bytes of parameters whose full data is present).

This file is also the launcher script for the CLI run (``torchrun ... tests/test_zero3.py fit ...``
calls ``lite_ppo.cli.main``) and for the gather check (``... tests/test_zero3.py gather OUT``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from test_distributed import (  # noqa: E402
    MODES,
    _free_port,
    assert_same_as_single,
    initial_weights,
    launch,
    load_results,
    single_results,
    skip_deepspeed_shm_op,
    worker_env,
)

pytestmark = pytest.mark.slow


def torchrun(args: list[str], timeout: int = 400) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port()), str(Path(__file__).resolve()), *args]
    proc = subprocess.run(cmd, env=worker_env(), cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-10000:]}")
    return proc


# ------------------------------------------------------------------------------- exact semantics
def test_zero3_equals_one_process(tmp_path, tiny_model_path, single_results):
    """Token-level aggregation, 2 ZeRO-3 ranks with activation checkpointing vs 1 process."""
    launch("zero3", tmp_path, tiny_model_path, modes=["token-mean"], gradient_checkpointing=True)
    measured = assert_same_as_single(load_results(tmp_path, "token-mean"), load_results(single_results, "token-mean"), initial_weights(tiny_model_path))
    print({k: f"{v:.3g}" for k, v in measured.items() if not k.startswith("stat:")})


# ------------------------------------------------------------------------------- the CLI
def _fit_args(tmp: Path, version: str, *extra: str) -> list[str]:
    return [
        "fit",
        "--config", str(REPO / "configs/recipes/lite_ppo.yaml"),
        "--config", str(REPO / "configs/models/tiny.yaml"),
        "--config", str(REPO / "configs/strategies/zero3_cpu_test.yaml"),
        "--trainer.default_root_dir", str(tmp),
        "--trainer.logger.init_args.save_dir", str(tmp / "tb"),
        "--trainer.logger.init_args.version", version,
        "--trainer.enable_progress_bar", "false",
        *extra,
    ]


def test_cli_fit_resume_export(tmp_path, tiny_model_path):
    from conftest import read_scalars

    ckpt_dir = tmp_path / "ckpt"
    torchrun(
        _fit_args(
            tmp_path,
            "run",
            "--trainer.callbacks+=test_distributed.FirstTokenParityReward",
            "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
            f"--trainer.callbacks.dirpath={ckpt_dir}",
            "--trainer.callbacks.every_n_train_steps=2",
            "--trainer.callbacks.save_top_k=-1",
            "--model.gradient_checkpointing=true",
        )
    )
    scalars = read_scalars(tmp_path / "tb" / "lite_ppo" / "run")
    for tag in ("rollout/reward_mean", "loss/policy", "train/grad_norm", "train/lr", "time/generation_s"):
        assert len(scalars.get(tag, [])) == 3, f"{tag}: {scalars.get(tag)}"
    assert all(v > 0 and v == v for _, v in scalars["train/grad_norm"]), scalars["train/grad_norm"]
    # sharded ZeRO-3 checkpoints: a folder per checkpoint with one model/optimizer shard per rank
    ckpts = sorted(ckpt_dir.glob("*step=*.ckpt"), key=lambda p: int(p.name.split("step=")[1].split(".")[0]))
    assert [p.name.split("step=")[1] for p in ckpts] == ["2.ckpt", "4.ckpt", "6.ckpt"], ckpts
    shards = sorted(p.name for p in (ckpts[-1] / "checkpoint").iterdir())
    assert sum("optim_states" in s for s in shards) == 2, shards

    # resume from step 2 (after the first training step): the two remaining steps run
    torchrun(_fit_args(tmp_path, "resumed", "--trainer.callbacks+=test_distributed.FirstTokenParityReward", f"--ckpt_path={ckpts[0]}"))
    resumed = read_scalars(tmp_path / "tb" / "lite_ppo" / "resumed")
    assert len(resumed["rollout/reward_mean"]) == 2
    assert sorted(s for s, _ in resumed["loss/policy"]) == [s for s, _ in scalars["loss/policy"]][1:]

    # export the last checkpoint of the first run and load it in transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lite_ppo.cli import main as cli_main
    from lite_ppo.export import fp32_policy_state_dict

    out = tmp_path / "hf"
    with pytest.raises(SystemExit) as done:
        cli_main(["export-hf", str(ckpts[-1]), str(out), "--model", "builtin:tiny"])
    assert done.value.code == 0
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    # the exported weights are the trained ones: they moved from the initial model and equal the shards
    w0 = initial_weights(tiny_model_path)
    trained = fp32_policy_state_dict(ckpts[-1])
    state = model.state_dict()
    assert any(not torch.equal(state[k], w0[k]) for k in w0)
    for k, v in trained.items():
        torch.testing.assert_close(state[k], v.to(state[k].dtype), rtol=0, atol=0)
    ids = tok("What is 2 plus 3?", return_tensors="pt")
    gen = model.generate(**ids, max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
    assert gen.shape[1] > ids["input_ids"].shape[1]


# ------------------------------------------------------------------------------- bucketed gather
BUCKET = 40_000  # bytes; the tiny model's largest tensor (the tied embedding) is ~292 kB, its layers 8-131 kB


def test_bucketed_gather_bound(tmp_path, tiny_model_path):
    torchrun(["gather", str(tmp_path), tiny_model_path], timeout=300)
    result = json.loads((tmp_path / "gather.json").read_text())
    assert result["tensors"] == result["state_dict_keys"]
    assert result["max_present_bytes"] <= max(BUCKET, result["largest_tensor_bytes"])
    # buckets that are not a single oversize tensor hold at most BUCKET bytes
    assert result["max_present_bytes_multi"] <= BUCKET
    assert result["max_equal_to_full"]  # the gathered tensors equal the unpartitioned model
    assert result["partitioned_after"]  # and everything is partitioned again afterwards


def _gather_check(out: Path, model_path: str) -> None:
    """Under 2 ranks: partition the tiny model with ZeRO-3 and iterate the bucketed gather, measuring
    after every yielded tensor the bytes of parameters whose full data is present on this rank."""
    skip_deepspeed_shm_op()
    import deepspeed
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
    from transformers import AutoConfig, AutoModelForCausalLM

    from lite_ppo.strategies import GatherStats, iter_gathered_state

    deepspeed.init_distributed("gloo")
    reference = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).state_dict()
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
    with deepspeed.zero.Init(config_dict_or_path=config):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path), dtype=torch.float32)
    with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=0):
        if torch.distributed.get_rank() == 0:
            model.load_state_dict(reference, strict=False)
    params = list({id(p): p for p in model.parameters()}.values())

    def present_bytes() -> int:
        return sum(p.ds_numel * p.element_size() for p in params if p.ds_status == ZeroParamStatus.AVAILABLE)

    assert present_bytes() == 0
    stats = GatherStats()
    largest = max(p.ds_numel * p.element_size() for p in params)
    peak = peak_multi = 0
    names, equal = [], True
    for name, tensor in iter_gathered_state(model, bucket_bytes=BUCKET, stats=stats):
        now = present_bytes()
        peak = max(peak, now)
        if tensor.numel() * tensor.element_size() <= BUCKET:
            peak_multi = max(peak_multi, now)
        names.append(name)
        equal &= torch.equal(tensor, reference[name])
    if torch.distributed.get_rank() == 0:
        (out / "gather.json").write_text(
            json.dumps(
                {
                    "tensors": names,
                    "state_dict_keys": list(model.state_dict().keys()),
                    "max_present_bytes": peak,
                    "max_present_bytes_multi": peak_multi,
                    "largest_tensor_bytes": largest,
                    "buckets": stats.buckets,
                    "max_bucket_bytes": stats.max_bucket_bytes,
                    "max_equal_to_full": bool(equal),
                    "partitioned_after": present_bytes() == 0,
                }
            )
        )


if __name__ == "__main__":
    if sys.argv[1] == "gather":
        _gather_check(Path(sys.argv[2]), sys.argv[3])
    else:
        skip_deepspeed_shm_op()
        from lite_ppo.cli import main

        main(sys.argv[1:])
