"""DeepSpeed ZeRO-3 on the CPU (2 gloo processes): exact semantics, the CLI end to end, bucketed gather.

- The fixed global batch of tests/helpers/distributed.py through ZeRO-3 (with activation checkpointing)
  gives the 1-process advantages, losses, gradient and weight updates (same tolerances as DDP); the
  HF engine then generates on the partitioned policy with ranks stopping at different lengths.
- ``lite-ppo fit`` with configs/strategies/zero3_cpu_test.yaml: 3 training steps of the tiny model
  with HF-engine rollouts on partitioned parameters, TensorBoard scalars, sharded checkpoints;
  a resume from the second checkpoint runs the remaining step (and reproduces the first run's
  weights exactly once the sampler fix is in); ``lite-ppo export-hf`` writes a folder that
  transformers loads and generates with, holding exactly the consolidated trained weights.
- :func:`lite_ppo.strategies.weight_gather.iter_gathered_state` never has more than ``bucket_bytes`` of
  parameters gathered (measured independently: bytes of parameters whose full data is present).

This file is also the launcher script of the CLI runs (``torchrun ... tests/test_zero3.py fit ...``
calls ``lite_ppo.cli.main`` after switching off DeepSpeed's JIT-compiled shared-memory op).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Callback

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from helpers.distributed import (  # noqa: E402
    _free_port,
    assert_same_as_single,
    exit_without_finalizing,
    initial_weights,
    launch,
    load_results,
    skip_deepspeed_shm_op,
    worker_env,
)


def torchrun(args: list[str], timeout: int = 400) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(_free_port()),
        str(Path(__file__).resolve()),
        *args,
    ]
    proc = subprocess.run(cmd, env=worker_env(), cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-10000:]}"
        )
    return proc


# ------------------------------------------------------------------------------- exact semantics
# bytes; the tiny model (fp32) has a 292 kB tied embedding (gathered alone: larger than the bucket),
# 128 kB MLP matrices, 64/32 kB attention matrices and 0.5 kB norms, so buckets group several tensors.
BUCKET = 150_000


@pytest.fixture(scope="module")
def zero3_run(tmp_path_factory, tiny_model_path) -> Path:
    """One 2-rank ZeRO-3 run (activation checkpointing on) of the fixed global batch; afterwards the
    worker also generates with the HF engine and measures the bucketed gather (BUCKET)."""
    out = tmp_path_factory.mktemp("zero3")
    launch(
        "zero3",
        out,
        tiny_model_path,
        modes=["token-mean", "token-mean@clip0.5"],
        gradient_checkpointing=True,
        gather_bucket=BUCKET,
    )
    return out


@pytest.mark.slow
def test_zero3_equals_one_process(zero3_run, tiny_model_path, single_results):
    """Token-level aggregation: 2 ZeRO-3 ranks (partitioned parameters, gradients accumulated over
    micro-batches inside DeepSpeed, DeepSpeed's grad norm) vs 1 process, same tolerances as DDP."""
    w0 = initial_weights(tiny_model_path)
    for mode in ("token-mean", "token-mean@clip0.5"):  # without clipping, and DeepSpeed's clipping vs torch's
        measured = assert_same_as_single(
            load_results(zero3_run, mode), load_results(single_results, mode), w0, compare_grads="@clip" not in mode
        )
        print(mode, {k: f"{v:.3g}" for k, v in measured.items() if not k.startswith("stat:")})


@pytest.mark.slow
def test_hf_engine_generates_on_partitioned_policy(zero3_run):
    """Greedy generation on ZeRO-3 parameters with ranks stopping at different lengths (3 vs 9 new
    tokens): every forward all-gathers from all ranks, so this completes only with synced_gpus."""
    lengths = [r["engine_lengths"] for r in load_results(zero3_run, "token-mean")]
    assert max(lengths[0]) <= 3 and max(lengths[1]) > 3, lengths


@pytest.mark.slow
def test_bucketed_gather_bound(zero3_run):
    for r in load_results(zero3_run, "token-mean"):
        g = r["gather"]
        assert g["present_before"] == 0 and g["present_after"] == 0  # all partitioned outside the gather
        assert sorted(g["names"]) == sorted(g["state_dict_keys"]) and len(set(g["names"])) == len(g["names"])
        # never more than BUCKET bytes of full parameters at once, except a single tensor larger than it
        assert g["max_present_bytes"] <= max(BUCKET, g["largest_tensor_bytes"])
        assert g["max_present_bytes_multi"] <= BUCKET
        assert g["oversize"] == ["model.embed_tokens.weight"]  # the tied embedding, gathered once
        assert g["buckets"] < g["unique_tensors"]  # buckets do group tensors
        assert g["equal_to_full"]  # same tensors as a whole-model gather


def test_plan_buckets_bounds_and_groups():
    """Without DeepSpeed: bucket planning by full sizes, tied tensors counted once, groups kept whole."""
    from lite_ppo.strategies.weight_gather import iter_gathered_state, plan_buckets, transformer_block

    e, q0, k0, q1, big = (torch.zeros(n) for n in (10, 20, 30, 10, 50))  # float32: 40, 80, 120, 40, 200 bytes
    state = [
        ("model.embed", e),
        ("model.layers.0.q", q0),
        ("model.layers.0.k", k0),
        ("model.layers.1.q", q1),
        ("lm_head", e),
        ("big", big),
    ]
    names = lambda buckets: [[n for n, _ in bucket] for bucket in buckets]  # noqa: E731
    assert names(plan_buckets(state, 120)) == [
        ["model.embed", "model.layers.0.q"],
        ["model.layers.0.k"],
        ["model.layers.1.q", "lm_head"],
        ["big"],
    ]
    # a block is never split: layers.0 (200 bytes) goes alone, over the bound
    assert names(plan_buckets(state, 120, transformer_block)) == [
        ["model.embed"],
        ["model.layers.0.q", "model.layers.0.k"],
        ["model.layers.1.q", "lm_head"],
        ["big"],
    ]
    # a plain model: every state_dict entry, tied names right after their tensor's first name
    model = torch.nn.Sequential(torch.nn.Embedding(4, 2), torch.nn.Linear(2, 4, bias=False))
    model[1].weight = model[0].weight
    assert [n for n, _ in iter_gathered_state(model, 8)] == ["0.weight", "1.weight"]


# ------------------------------------------------------------------------------- the CLI
def _fit_args(tmp: Path, version: str, *extra: str, recipe: str = "lite_ppo") -> list[str]:
    return [
        "fit",
        "--config",
        str(REPO / f"configs/recipes/{recipe}.yaml"),
        "--config",
        str(REPO / "configs/models/tiny.yaml"),
        "--config",
        str(REPO / "configs/strategies/zero3_cpu_test.yaml"),
        "--model.model_path=builtin:tiny",  # the export test compares against the random tiny model
        "--trainer.default_root_dir",
        str(tmp),
        "--trainer.logger.init_args.save_dir",
        str(tmp / "tb"),
        "--trainer.logger.init_args.version",
        version,
        "--trainer.enable_progress_bar",
        "false",
        *extra,
    ]


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory, tiny_model_path) -> dict:
    """``lite-ppo fit`` for 3 steps (checkpoint every training step), then a resume from the
    checkpoint of step 2 of 3 (optimizer step 4) that runs the last step again."""
    from helpers.fits import read_scalars

    tmp = tmp_path_factory.mktemp("zero3_cli")
    common = ["--trainer.callbacks+=helpers.distributed.FirstTokenParityReward", "--model.gradient_checkpointing=true"]

    def checkpoints_to(folder: Path) -> list[str]:
        return [
            "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
            f"--trainer.callbacks.dirpath={folder}",
            "--trainer.callbacks.every_n_train_steps=2",
            "--trainer.callbacks.save_top_k=-1",
        ]

    torchrun(_fit_args(tmp, "run", *common, *checkpoints_to(tmp / "ckpt")))
    ckpts = sorted((tmp / "ckpt").glob("*step=*.ckpt"), key=lambda p: int(p.name.split("step=")[1].split(".")[0]))
    torchrun(_fit_args(tmp, "resumed", *common, *checkpoints_to(tmp / "ckpt_resumed"), f"--ckpt_path={ckpts[1]}"))
    return {
        "tmp": tmp,
        "ckpts": ckpts,
        "resumed_ckpts": sorted((tmp / "ckpt_resumed").glob("*step=*.ckpt")),
        "scalars": read_scalars(tmp / "tb" / "lite_ppo" / "tiny" / "run"),  # runs/<recipe>/<model>/<version>
        "resumed_scalars": read_scalars(tmp / "tb" / "lite_ppo" / "tiny" / "resumed"),
    }


@pytest.mark.extended
@pytest.mark.slow
def test_cli_fit_logs_and_saves_shards(cli_runs):
    scalars = cli_runs["scalars"]
    for tag in ("reward/mean", "loss/policy", "update/grad_norm", "update/lr", "time/generation_s"):
        assert len(scalars.get(tag, [])) == 3, f"{tag}: {scalars.get(tag)}"
    # DeepSpeed's own (pre-clip, global) norm of every optimizer step, not a placeholder
    assert all(v > 0 and v == v for _, v in scalars["update/grad_norm"]), scalars["update/grad_norm"]
    # sharded ZeRO-3 checkpoints: a folder per checkpoint with one model/optimizer shard per rank
    assert [p.name.split("step=")[1] for p in cli_runs["ckpts"]] == ["2.ckpt", "4.ckpt", "6.ckpt"], cli_runs["ckpts"]
    shards = sorted(p.name for p in (cli_runs["ckpts"][-1] / "checkpoint").iterdir())
    assert sum("optim_states" in s for s in shards) == 2 and sum("model_states" in s for s in shards) == 2, shards
    # DeepSpeed clipped at the module's max_grad_norm (the recipe's 1.0)
    states = torch.load(
        cli_runs["ckpts"][-1] / "checkpoint" / "zero_pp_rank_0_mp_rank_00_model_states.pt",
        map_location="cpu",
        weights_only=False,
    )
    assert states["ds_config"]["gradient_clipping"] == states["hyper_parameters"]["max_grad_norm"] == 1.0


@pytest.mark.extended
@pytest.mark.slow
def test_cli_resume_continues(cli_runs):
    resumed, scalars = cli_runs["resumed_scalars"], cli_runs["scalars"]
    assert len(resumed["reward/mean"]) == 1  # only the remaining training step ran
    assert [s for s, _ in resumed["loss/policy"]] == [s for s, _ in scalars["loss/policy"]][2:]
    assert [p.name for p in cli_runs["resumed_ckpts"]] == ["epoch=0-step=6.ckpt"]


@pytest.mark.extended
@pytest.mark.slow
def test_cli_resume_reproduces_the_run(cli_runs):
    """The rollout seeds depend only on (batch index, rank), so the resumed last step equals the first
    run's last step exactly when weights, AdamW states, LR schedule and data position were all
    restored from the shards (measured with the sampler fix: max abs difference 0.0)."""
    from lite_ppo.checkpoints.reader import read_checkpoint

    final = read_checkpoint(cli_runs["ckpts"][-1]).policy_weights
    resumed = read_checkpoint(cli_runs["resumed_ckpts"][-1]).policy_weights
    for k in final:
        torch.testing.assert_close(resumed[k], final[k], rtol=0, atol=1e-6)


@pytest.mark.extended
@pytest.mark.slow
def test_export_hf_loads_and_generates(cli_runs, tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lite_ppo.checkpoints.reader import read_checkpoint
    from lite_ppo.cli import main as cli_main

    last = cli_runs["ckpts"][-1]
    out = cli_runs["tmp"] / "hf"
    with pytest.raises(SystemExit) as done:
        cli_main(["export-hf", str(last), str(out), "--model", "builtin:tiny"])
    assert done.value.code == 0
    assert (out / "tokenizer.json").exists() and (out / "config.json").exists()
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    # the exported weights are the trained ones: they moved away from the initial model and equal
    # the consolidated fp32 master weights of the shards
    w0 = initial_weights(tiny_model_path)
    state = model.state_dict()
    assert any(not torch.equal(state[k], w0[k]) for k in w0)
    for k, v in read_checkpoint(last).policy_weights.items():
        torch.testing.assert_close(state[k], v.to(state[k].dtype), rtol=0, atol=0)
    ids = tok("What is 2 plus 3?", return_tensors="pt")
    gen = model.generate(**ids, max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
    assert gen.shape[1] > ids["input_ids"].shape[1]
    # `lite-ppo evaluate` reads the same sharded folder: the policy it evaluates is the exported one
    from lite_ppo.evaluation.runner import load_policy_module

    module = load_policy_module(str(last))
    for k, v in module.policy.state_dict().items():
        torch.testing.assert_close(v, state[k], rtol=0, atol=0)
    assert module.policy_version > 0


class ReferenceLayout(Callback):
    """Writes how this rank holds the ``KLPenalty`` reference's parameters to ``<path>.<rank>`` at the
    end of training (before ``on_fit_end`` drops the reference)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_end(self, trainer, pl_module) -> None:
        from lite_ppo.callbacks import KLPenalty

        reference = next(cb for cb in trainer.callbacks if isinstance(cb, KLPenalty)).reference
        params = list(reference.parameters())
        layout = {
            "partitioned": all(hasattr(p, "ds_id") for p in params),
            "shard_numel": sum(p.ds_tensor.numel() for p in params if hasattr(p, "ds_tensor")),
            "full_numel": sum(getattr(p, "ds_numel", p.numel()) for p in params),
        }
        Path(f"{self.path}.{trainer.global_rank}").write_text(json.dumps(layout))


@pytest.mark.extended
@pytest.mark.slow
def test_kl_reference_is_partitioned_and_starts_at_the_policy(tmp_path, tiny_model_path):
    """GRPO's KL loss under ZeRO-3. Before, the reference was built partitioned (transformers' ZeRO-3
    flag is on for the policy) but used without a DeepSpeed engine to gather its parameters: the
    first reference forward failed. Now it has its own engine: each rank holds half of it, and with
    one optimizer step per rollout the first step's KL is exactly 0 (the policy is the reference
    until its first update) and the second step's is not."""
    from helpers.fits import read_scalars

    probe = tmp_path / "reference"
    torchrun(
        _fit_args(
            tmp_path,
            "run",
            "--trainer.callbacks+=helpers.distributed.FirstTokenParityReward",
            "--trainer.callbacks+=test_zero3.ReferenceLayout",
            f"--trainer.callbacks.path={probe}",
            "--model.num_mini_batches=1",
            "--data.steps_per_epoch=2",
            "--data.val_size=0",
            recipe="grpo",
        )
    )
    for rank in (0, 1):
        layout = json.loads(Path(f"{probe}.{rank}").read_text())
        assert layout["partitioned"]
        # each parameter's shard is ceil(numel / 2): half of the model, give or take one per tensor
        assert abs(layout["shard_numel"] - layout["full_numel"] / 2) <= 100, layout
    kl = dict(read_scalars(tmp_path / "tb" / "grpo" / "tiny" / "run")["kl/ref_kl"])
    assert abs(kl[0]) < 1e-6 and kl[1] > 1e-5, kl


if __name__ == "__main__":
    skip_deepspeed_shm_op()
    from lite_ppo.cli import main

    try:
        main(sys.argv[1:])
    except SystemExit as done:  # the CLI's own exit, then out without finalizing (see the helper)
        if done.code is not None and not isinstance(done.code, int):
            print(done.code, file=sys.stderr)
        exit_without_finalizing(done.code if isinstance(done.code, int) else int(done.code is not None))
    exit_without_finalizing(0)
