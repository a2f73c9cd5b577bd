"""The fixed global batch of the 2-rank = 1-rank tests, the worker that runs it, and the comparison.

The global batch (4 prompts x 4 responses, rewards chosen so that per-rank and global batch
statistics differ) is split as the data module splits it: rank r gets prompts [2r, 2r+2), and
builds its own RolloutBatch from them (its own padding widths). Rank 0's responses are short
(2-6 tokens) and rank 1's long (8-20), so per-rank token counts differ by ~4x: a loss that divided
by the local token count, or normalized by a local reward std, would not match.

The run goes through the real module code path: ``Trainer.fit`` for one training step (two
optimizer steps: ``num_mini_batches=2``, each accumulated over micro-batches of 2), with the rollout
injected by a test callback instead of generated. :func:`assert_same_as_single` compares with the
1-process run:

- the advantages (batch-std normalization with the global std), and those REINFORCE++,
  REINFORCE++-baseline and the KL-shaped REINFORCE++ (per token) compute on the same batch with
  their global whitening statistics;
- the logged loss values, the global grad norm of each optimizer step;
- the tokens the global-batch selections pick (:data:`MODE_TECHNIQUES`): the high-entropy tokens and
  Clip-Cov's seeded draw (``seq-mean-token-mean``), KL-Cov's top covariances (``seq-mean-token-sum``);
- the updated weights (their change from the initial weights).

This file is also the worker script: ``python -m torch.distributed.run --nproc_per_node 2
tests/helpers/distributed.py --strategy ddp --out DIR`` (tests/test_distributed.py; tests/test_zero3.py
runs it with ``--strategy zero3``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import torch

from lite_ppo.technique import Technique

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
REPO = TESTS.parent
# loss aggregation modes; "@clip<norm>" adds gradient clipping at that norm (the first step's
# global grad norm is ~1.3 in token-mean: 0.5 clips every step, by torch or inside DeepSpeed)
MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-mean@clip0.5")
PROMPTS, G, WORLD = 4, 4, 2
# Techniques that select tokens over the global batch, added in one mode each (no extra run): the
# entropy quantile and the covariances gather every rank's tokens, so the selection, its threshold and
# the loss it gives must equal the 1-process ones. Bounds (0, 100) make about half the tokens
# Clip-Cov candidates with this random model (|Cov_t| < 1).
MODE_TECHNIQUES = {  # mode -> [(lite_ppo.callbacks class, init args)]
    "seq-mean-token-mean": [
        ("HighEntropyTokens", {"share": 0.3}),
        ("ClipCov", {"share": 0.1, "lower": 0.0, "upper": 100.0, "seed": 3}),
    ],
    "seq-mean-token-sum": [("KLCov", {"share": 0.1, "coef": 1.0})],
}

# Tolerances (float32 CPU). Two sources of difference only: (1) different padding widths per rank
# (masked positions change nothing mathematically, but SDPA/matmul reduce over different lengths,
# ~1e-7 relative per op), (2) summation order of the gradient (all-reduce of two partial sums vs
# one sum over micro-batches). Advantages use float64 statistics of identical rewards: exact up to
# the float32 cast.
ADV_ATOL = 1e-6
# The KL-shaped REINFORCE++ advantages read log-probs of the weights *after* the update, which ZeRO-3
# reproduces to DELTA_RTOL (below), not bitwise (measured: docs/benchmarks.md, "Equivalence tolerances";
# DDP: within ADV_ATOL). Whitening with one rank's statistics instead of the global ones is off by ~0.1-1.
SHAPED_ATOL = 1e-4
# Losses, grad norms and diagnostics are sums of ~100 float32 terms: 1e-5 relative (measured:
# <= 1.2e-7 absolute on values of order 0.1-1).
STAT_RTOL, STAT_ATOL = 1e-5, 1e-6
# The gradient of the first optimizer step, relative to its largest entry (measured: <= 2e-7,
# i.e. float32 rounding; a per-rank denominator would be off by a factor of ~2-4).
GRAD_RTOL = 1e-5
# Weights after two AdamW steps, compared as the update (w_after - w_before) relative to its largest
# entry (~2 * lr). AdamW's first steps move an entry by ~lr * g / (|g| + eps): where |g| is near
# eps = 1e-8 the float32 noise of g (~1e-10 here) is amplified to ~1e-2 * lr. Measured: a handful of
# entries of ~70k per matrix differ by up to 4e-3 of the largest update, all others by < 1e-4. So:
# every entry within 2e-2 of the largest update, and at most 1e-3 of the entries beyond 1e-4 of it.
DELTA_RTOL, DELTA_BULK_RTOL, DELTA_BULK_FRACTION = 2e-2, 1e-4, 1e-3
# Statistics the module computes from this rank's rows only (none: every logged statistic is global).
RANK_LOCAL_STATS: set[str] = set()


# --------------------------------------------------------------------------------- the batch
def global_rollout_parts(vocab_size: int, eos_id: int):
    """Prompt ids, generations and rewards of the fixed global batch (plain python, deterministic)."""
    from lite_ppo.rollout.engine import Generation

    g = torch.Generator().manual_seed(1234)
    low = 3  # skip the special tokens
    prompt_ids, generations, rewards = [], [], []
    # rewards: rank 0 mostly right, rank 1 mostly wrong -> per-rank stds differ from the global std
    reward_table = [[1, 1, 1, 0], [1, 0, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]]
    for p in range(PROMPTS):
        plen = 5 + 2 * p
        prompt_ids.append(torch.randint(low, vocab_size, (plen,), generator=g).tolist())
        group = []
        for i in range(G):
            # rank 0 (prompts 0, 1): 2-6 tokens; rank 1 (prompts 2, 3): 8-20 tokens
            n = (2 + i + p) if p < 2 else (8 + 3 * i + 2 * (p - 2) + (i % 2))
            tokens = torch.randint(low, vocab_size, (n,), generator=g).tolist()
            finished = i != 3  # one truncated response per group
            if finished:
                tokens[-1] = eos_id
            group.append(Generation(tokens, finished))
        generations.append(group)
        rewards.extend(float(r) for r in reward_table[p])
    return prompt_ids, generations, rewards


def rank_rollout(tokenizer, rank: int, world: int):
    """The RolloutBatch that rank ``rank`` of ``world`` builds from its contiguous share of prompts."""
    from lite_ppo.rollout.producer import build_rollout_batch

    prompt_ids, generations, rewards = global_rollout_parts(len(tokenizer), tokenizer.eos_token_id)
    per = PROMPTS // world
    lo, hi = rank * per, (rank + 1) * per
    return build_rollout_batch(
        prompt_ids[lo:hi], generations[lo:hi], rewards[lo * G : hi * G], tokenizer.pad_token_id, 1.0
    )


class FirstTokenParityReward(Technique):
    """Test-only reward shaping: reward 1 when the first response token id is even. The tiny random
    model never solves a problem, so without it every reward is 0, every advantage 0 and nothing
    trains. Use as ``--trainer.callbacks+=test_distributed.FirstTokenParityReward`` with tests/ on
    PYTHONPATH."""

    def shape_rewards(self, ctx, batch):
        return (batch.response_ids[:, 0] % 2 == 0).float() - batch.rewards


# --------------------------------------------------------------------------------- the worker
def skip_deepspeed_shm_op() -> None:
    """Use plain gloo collectives instead of DeepSpeed's shared-memory CPU all-reduce, a C++ extension
    JIT-compiled on first use (about 4 minutes on 2 cores, then cached): DeepSpeed falls back to
    torch.distributed when the op is absent. Test speed only; no effect on results."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import importlib

    # (not `import deepspeed.comm.torch as m`: deepspeed.comm's attribute `torch` is torch itself)
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None


def _worker(args) -> None:
    skip_deepspeed_shm_op()
    import lightning.pytorch as pl
    from given_rollouts import GivenRollouts  # this script's folder (tests/helpers) is on sys.path
    from torch.utils.data import DataLoader

    from lite_ppo import callbacks
    from lite_ppo.callbacks import AdvantageNormalization, KLCov, LossAggregation, ReinforcePlusPlus
    from lite_ppo.strategies import CPUDeepSpeedStrategy
    from lite_ppo.strategies.ranks import Ranks
    from lite_ppo.strategies.weight_gather import iter_gathered_state
    from lite_ppo.technique import Technique
    from lite_ppo.training.module import LitePPO

    torch.set_num_threads(1)
    out = Path(args.out)

    def this_ranks_share(trainer, module, batch_idx):
        """Replaces generation: this rank's share of the fixed global batch."""
        return rank_rollout(module.tokenizer, trainer.global_rank, trainer.world_size).to(module.device)

    class Record(Technique):
        def __init__(self):
            self.stats = None
            self.advantages = None
            self.reinforce_pp = None
            self.selections: dict[str, torch.Tensor] = {}
            self.grads = None
            self.micro = 0  # micro-batches so far in this optimizer step
            self.micros_per_step: list[int] = []
            self.allreduce_at: list[tuple[int, int]] = []  # (optimizer step, micro-batch) of each DDP bucket all-reduce

        def extra_loss_terms(self, ctx, minibatch):
            self.micro += 1  # called once per micro-batch, before its backward
            return {}

        def on_train_start(self, trainer, module):
            if args.lora:  # the starting weights (the adapters are random): what the updates are measured from
                self.initial = {n: t.float().clone() for n, t in iter_gathered_state(module.policy, copy=True)}
            # Lightning registers DDP communication hooks on CUDA only: register one here.
            if isinstance(trainer.strategy.model, torch.nn.parallel.DistributedDataParallel):
                from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

                def count_allreduce(state, bucket):
                    self.allreduce_at.append((len(self.micros_per_step), self.micro))
                    return allreduce_hook(state, bucket)

                trainer.strategy.model.register_comm_hook(None, count_allreduce)

        def on_before_optimizer_step(self, trainer, module, optimizer):
            self.micros_per_step.append(self.micro)
            self.micro = 0
            if self.grads is not None:  # the first optimizer step's gradient (all ranks, all micro-batches)
                return
            from deepspeed.utils import safe_get_full_grad  # plain p.grad without ZeRO; gathers under ZeRO-3

            self.grads = {}
            for name, p in module.policy.named_parameters():
                if not p.requires_grad:  # LoRA: the frozen base has no gradient
                    continue
                grad = safe_get_full_grad(p) if hasattr(p, "ds_id") else p.grad
                self.grads[name] = grad.detach().float().cpu().clone().reshape(getattr(p, "ds_shape", p.shape))

        def on_update_end(self, ctx, batch, stats):
            self.advantages = batch.advantages.detach().cpu().clone()
            # REINFORCE++ whitens over the global batch (token-weighted): rank 0's short and rank 1's
            # long responses give local statistics far from the global ones. Its advantages of this
            # rank's rows, and the statistics it logged (reduced here, which also resets them).
            self.reinforce_pp = {}
            for baseline in (False, True):
                advantages = ReinforcePlusPlus(group_baseline=baseline).compute_advantages(ctx, batch)
                logged = ctx.module.step_metrics.compute(Ranks(ctx.trainer))
                self.reinforce_pp[baseline] = (advantages.cpu(), {k: v.cpu() for k, v in logged.items()})
            # The KL-shaped return: per-token advantages whitened over every rank's response tokens,
            # the KL to the initial weights (the policy has taken its optimizer steps by now). This
            # rank's tokens, flattened row-major: in rank order they are the 1-process flattening.
            shaped = ReinforcePlusPlus(kl_coef=0.5)
            shaped.on_fit_start(ctx.trainer, ctx.module)
            advantages = shaped.compute_advantages(ctx, batch)
            logged = ctx.module.step_metrics.compute(Ranks(ctx.trainer))
            shaped.on_fit_end(ctx.trainer, ctx.module)
            tokens = advantages[batch.response_mask.bool()].cpu()
            self.reinforce_pp["kl_shaped"] = (tokens, {k: v.cpu() for k, v in logged.items()})
            self.stats = {k: torch.as_tensor(v).detach().float().cpu().clone() for k, v in stats.scalars.items()}
            # The token selections, flattened over this rank's loss tokens (row-major: concatenated
            # in rank order they are the 1-process flattening).
            tokens = batch.loss_mask > 0
            kl_cov = next((cb for cb in ctx.trainer.callbacks if isinstance(cb, KLCov)), None)
            chosen = {
                "policy_mask": batch.policy_mask,
                "token_weights": batch.token_weights,
                "kl_cov": None if kl_cov is None else kl_cov.penalized,
            }
            self.selections = {k: v[tokens].cpu().clone() for k, v in chosen.items() if v is not None}

    for first, mode in enumerate(args.modes.split(",")):
        aggregation, _, clip = mode.partition("@clip")
        max_grad_norm = float(clip) if clip else args.max_grad_norm
        record = Record()
        if args.strategy == "single":
            strategy, devices = "auto", 1
        elif args.strategy == "ddp":
            strategy, devices = "ddp", WORLD
        else:
            config = {
                "train_micro_batch_size_per_gpu": 1,  # only for DeepSpeed's throughput logging
                "zero_allow_untested_optimizer": True,
                "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, "overlap_comm": False},
            }
            if args.offload_optimizer:  # ZeRO-Offload: the module switches to DeepSpeedCPUAdam (compiled on first use)
                config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
            strategy, devices = CPUDeepSpeedStrategy(config=config), WORLD
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=devices,
            strategy=strategy,
            max_epochs=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            use_distributed_sampler=False,
            num_sanity_val_steps=0,
            callbacks=[
                AdvantageNormalization(mean_scope="group", std_scope="batch"),
                LossAggregation(mode=aggregation),
                GivenRollouts(this_ranks_share),
                record,
                # after record, whose on_update_end reads KLCov's selection before KLCov drops it
                *(getattr(callbacks, name)(**kwargs) for name, kwargs in MODE_TECHNIQUES.get(mode, [])),
            ],
        )
        if args.lora:
            torch.manual_seed(0)  # the adapters' random start: the same in 1 and 2 processes
        module = LitePPO(
            model_path=args.model,
            lora={"r": 4, "alpha": 8} if args.lora else None,
            lr=1e-3,
            num_mini_batches=2,
            micro_batch_size=2,
            max_grad_norm=max_grad_norm,
            gradient_checkpointing=args.gradient_checkpointing,
        )
        loader = DataLoader([{"problems": [], "index": 0}], batch_size=None, collate_fn=lambda x: x)
        trainer.fit(module, train_dataloaders=loader)
        weights = {
            name: t.float().clone() for name, t in iter_gathered_state(module.policy, bucket_bytes=1 << 20, copy=True)
        }
        rank = trainer.global_rank
        (out / mode).mkdir(parents=True, exist_ok=True)
        result = {
            "advantages": record.advantages,
            "reinforce_pp": record.reinforce_pp,
            "selections": record.selections,
            "stats": record.stats,
            "world": trainer.world_size,
            "global_step": trainer.global_step,
        }
        result.update(micros_per_step=record.micros_per_step, allreduce_at=record.allreduce_at)
        if args.strategy == "zero3" and first == 0:
            # HF generate on partitioned parameters with ranks that stop at different steps: every
            # forward all-gathers from all ranks, so this hangs unless generate runs with synced_gpus.
            from lite_ppo.rollout import HFEngine, SamplingConfig

            engine = HFEngine()
            engine.setup(module.policy, module.tokenizer, args.model)
            prompts = [module.tokenizer(q)["input_ids"] for q in ("What is 2 plus 3?", "Compute 7 times 6.")]
            sampling = SamplingConfig(n=1, greedy=True, max_new_tokens=3 if rank == 0 else 9)
            result["engine_lengths"] = [len(group[0].token_ids) for group in engine.generate(prompts, sampling)]
            if args.gather_bucket:
                result["gather"] = measure_bucketed_gather(module.policy, args.gather_bucket, weights)
        if rank == 0:
            result["weights"] = weights
            result["grads"] = record.grads
            result["initial"] = getattr(record, "initial", None)
        torch.save(result, out / mode / f"rank{rank}.pt")
        del trainer, module


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", choices=["single", "ddp", "zero3"], required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--max-grad-norm", type=float, default=None)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--gather-bucket", type=int, default=0, help="zero3: also measure the bucketed gather")
    parser.add_argument("--offload-optimizer", action="store_true", help="zero3: offload optimizer states to the CPU")
    parser.add_argument("--lora", action="store_true", help="train LoRA adapters (r 4) on the frozen tiny model")
    _worker(parser.parse_args())
    exit_without_finalizing(0)


def exit_without_finalizing(code: int) -> None:
    """End a worker process without Python's finalization (``os._exit``), its results already saved.

    A gloo worker thread drops its last reference to a finished all-gather's tensors a moment after
    the collective returns, which needs the GIL; if the main thread is finalizing the interpreter by
    then, that thread is unwound inside a noexcept destructor and the process aborts ("terminate
    called without an active exception", exit -6; seen in gdb: ``~AsyncAllgatherWork`` ->
    ``decref_pyobject`` -> ``take_gil`` -> ``pthread_exit``), in most runs on a fast 2-core machine.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# --------------------------------------------------------------------------------- launching
def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        DS_ACCELERATOR="cpu",
        TOKENIZERS_PARALLELISM="false",
        PYTHONWARNINGS="ignore",
    )
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(TESTS), env.get("PYTHONPATH", "")])
    # A test that called seed_everything leaves PL_GLOBAL_SEED in this process's environment; Lightning's
    # DDP workers re-seed from it at setup (a single process does not), which would give the 2 ranks
    # other random LoRA adapters than the 1-process run. The workers seed themselves.
    for name in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS"):
        env.pop(name, None)
    return env


def launch(
    strategy: str,
    out: Path,
    model: str,
    modes=MODES,
    max_grad_norm: float | None = None,
    gradient_checkpointing: bool = False,
    gather_bucket: int = 0,
    timeout: int = 300,
    lora: bool = False,
) -> None:
    """Run the worker in 1 process (``single``) or 2 gloo processes under torchrun."""
    cmd = [sys.executable]
    if strategy != "single":
        cmd += ["-m", "torch.distributed.run", "--nproc_per_node", str(WORLD), "--master_port", str(_free_port())]
    cmd += [
        str(Path(__file__).resolve()),
        "--strategy",
        strategy,
        "--out",
        str(out),
        "--model",
        model,
        "--modes",
        ",".join(modes),
    ]
    if max_grad_norm is not None:
        cmd += ["--max-grad-norm", str(max_grad_norm)]
    if gradient_checkpointing:
        cmd += ["--gradient-checkpointing"]
    if gather_bucket:
        cmd += ["--gather-bucket", str(gather_bucket)]
    if lora:
        cmd += ["--lora"]
    proc = subprocess.run(cmd, env=worker_env(), cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
        )


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_results(out: Path, mode: str) -> list[dict]:
    files = sorted((out / mode).glob("rank*.pt"))
    return [torch.load(f, weights_only=False) for f in files]


def initial_weights(model: str) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return {
        k: v.float().clone()
        for k, v in AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).state_dict().items()
    }


def assert_same_as_single(
    multi: list[dict],
    single: list[dict],
    w0: dict[str, torch.Tensor],
    delta_rtol: float = DELTA_RTOL,
    compare_grads: bool = True,
) -> dict[str, float]:
    """Advantages, stats, first-step gradient and weight updates of the multi-rank run vs the
    1-process run; returns the measured worst-case differences (for the record).

    ``compare_grads=False`` for runs with clipping: the recorded gradient is the clipped one where
    torch clips (before ``optimizer.step``) but the unclipped one under DeepSpeed (which clips inside
    ``step``); the logged pre-clip grad norm and the weight updates are compared either way."""
    assert len(single) == 1 and len(multi) == WORLD
    ref = single[0]
    measured: dict[str, float] = {}
    # same number of optimizer steps
    assert all(r["global_step"] == ref["global_step"] for r in multi)
    # advantages: rank r's rows are rows [r*B/R, (r+1)*B/R) of the global batch
    adv = torch.cat([r["advantages"] for r in multi])
    torch.testing.assert_close(adv, ref["advantages"], atol=ADV_ATOL, rtol=0)
    measured["advantages_max_abs"] = (adv - ref["advantages"]).abs().max().item()
    # REINFORCE++ and REINFORCE++-baseline: the same advantages and global whitening statistics
    for baseline, (want, want_stats) in ref["reinforce_pp"].items():
        shaped = baseline == "kl_shaped"
        got = torch.cat([r["reinforce_pp"][baseline][0] for r in multi])
        torch.testing.assert_close(got, want, atol=SHAPED_ATOL if shaped else ADV_ATOL, rtol=0)
        kl_tag = {"reinforce_pp/ref_kl", "reinforce_pp/kl_clamped_share"} if shaped else set()
        assert set(want_stats) == {"reinforce_pp/return_mean", "reinforce_pp/return_std", *kl_tag}, want_stats
        if shaped:  # the policy moved: the KL shapes the returns, so tokens of one response differ
            assert float(want_stats["reinforce_pp/ref_kl"]) != 0 and len(set(want.tolist())) > 4
        for r in multi:
            torch.testing.assert_close(r["reinforce_pp"][baseline][1], want_stats, rtol=STAT_RTOL, atol=STAT_ATOL)
        measured[f"reinforce_pp_baseline={baseline}_max_abs"] = (got - want).abs().max().item()
    # the global-batch token selections pick exactly the 1-process tokens (their thresholds, shares and
    # losses are logged statistics, compared below)
    assert multi[0]["selections"].keys() == ref["selections"].keys()
    for name, want in ref["selections"].items():
        got = torch.cat([r["selections"][name] for r in multi])
        assert torch.equal(got, want), f"{name}: {int((got != want).sum())} of {want.numel()} tokens differ"
        assert 0 < int((want != 0).sum()) < want.numel(), name  # some tokens selected (or detached), not all
    # every logged training statistic is a global quantity: equal on all ranks and to the 1-process value
    for name, value in ref["stats"].items():
        if name.startswith("time/") or name in RANK_LOCAL_STATS:
            continue
        for r in multi:
            torch.testing.assert_close(
                r["stats"][name], value, rtol=STAT_RTOL, atol=STAT_ATOL, msg=lambda m, name=name: f"{name}: {m}"
            )
        measured[f"stat:{name}"] = max(abs(r["stats"][name] - value).item() for r in multi)
    # the gradient of the first optimizer step (before any update: no Adam in between)
    g_multi, g_single = multi[0]["grads"], ref["grads"]
    assert g_multi.keys() == g_single.keys()
    if compare_grads:
        g_scale = max(g.abs().max().item() for g in g_single.values())
        g_worst = max((g_multi[k] - g_single[k]).abs().max().item() for k in g_single)
        measured["grad_max_abs_diff"], measured["grad_scale"] = g_worst, g_scale
        assert g_worst <= GRAD_RTOL * g_scale, f"gradients differ by {g_worst:.3g} (largest entry {g_scale:.3g})"
    # weights: compare the updates
    w_multi, w_single = multi[0]["weights"], ref["weights"]
    assert w_multi.keys() == w_single.keys()
    scale = max((w_single[k] - w0[k]).abs().max().item() for k in w_single)
    assert scale > 0, "the reference step did not change the weights"
    diffs = torch.cat([((w_multi[k] - w0[k]) - (w_single[k] - w0[k])).abs().reshape(-1) for k in w_single])
    worst = diffs.max().item()
    beyond_bulk = (diffs > DELTA_BULK_RTOL * scale).float().mean().item()
    measured.update(
        weight_update_max_abs_diff=worst, weight_update_scale=scale, weight_update_fraction_beyond_bulk=beyond_bulk
    )
    assert worst <= delta_rtol * scale, f"weight updates differ by {worst:.3g} (largest update {scale:.3g})"
    assert beyond_bulk <= DELTA_BULK_FRACTION, (
        f"{beyond_bulk:.3g} of the weight updates differ by more than {DELTA_BULK_RTOL} of the largest"
    )
    return measured


def measure_bucketed_gather(policy: torch.nn.Module, bucket: int, full: dict[str, torch.Tensor]) -> dict:
    """Iterate the bucketed gather of a ZeRO-3 partitioned ``policy`` (collective: every rank) and
    measure, after every yielded tensor, the bytes of parameters whose full data is present on this
    rank (independently of the helper's own accounting). ``full``: the same weights gathered whole."""
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    from lite_ppo.strategies.weight_gather import GatherStats, iter_gathered_state

    params = list({id(p): p for p in policy.parameters()}.values())
    assert all(hasattr(p, "ds_id") for p in params)

    def present_bytes() -> int:
        return sum(p.ds_numel * p.element_size() for p in params if p.ds_status == ZeroParamStatus.AVAILABLE)

    before = present_bytes()
    stats = GatherStats()
    peak = peak_multi = 0
    names, equal = [], True
    for name, tensor in iter_gathered_state(policy, bucket_bytes=bucket, stats=stats):
        now = present_bytes()
        peak = max(peak, now)
        if tensor.numel() * tensor.element_size() <= bucket:
            peak_multi = max(peak_multi, now)
        names.append(name)
        equal &= torch.equal(tensor.float(), full[name])
    return {
        "names": names,
        "state_dict_keys": list(policy.state_dict().keys()),
        "present_before": before,
        "present_after": present_bytes(),
        "max_present_bytes": peak,
        "max_present_bytes_multi": peak_multi,
        "largest_tensor_bytes": max(p.ds_numel * p.element_size() for p in params),
        "buckets": stats.buckets,
        "unique_tensors": len(params),
        "oversize": stats.oversize,
        "max_bucket_bytes": stats.max_bucket_bytes,
        "equal_to_full": bool(equal),
    }


if __name__ == "__main__":
    main()
