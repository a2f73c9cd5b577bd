"""Wall time and memory of one weight sync under ZeRO-3: gather the partitioned policy in buckets and
push it into a colocated vLLM engine.

    # 2 ranks (ZeRO-3 over 2 gloo processes, one in-process vLLM engine per rank, as in training):
    export DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 VLLM_ENABLE_V1_MULTIPROCESSING=0
    torchrun --nproc_per_node 2 benchmarks/bench_weight_sync.py --models tiny
    torchrun --nproc_per_node 2 benchmarks/bench_weight_sync.py --models smollm2
    # gather only, both models in one launch; 1 rank (ZeRO-3 with one partition: the gather is a copy):
    torchrun --nproc_per_node 1 benchmarks/bench_weight_sync.py --models tiny,smollm2 --no-engine

For each model (``builtin:tiny``, ``builtin:smollm2-135m-instruct``) and each rank it prints:

- ``gather``: :func:`lite_ppo.strategies.weight_gather.iter_gathered_state` alone (bucketed all-gather, no engine);
- ``sync``: ``VLLMEngine.sync_weights(policy)``, the project's engine path (the same gather with
  whole-block buckets, a copy in the engine's dtype, vLLM ``reload_weights``, prefix-cache reset);
- ``push``: ``iter_gathered_state`` fed straight into vLLM's ``reload_weights`` (one pass, lazy,
  no block grouping): the floor the engine path is compared with;

each with the wall time (median of ``--repeats``), the peak bytes of parameters gathered at once
(full tensors present on the rank, measured after every yielded tensor) and the peak growth of the
process's resident memory during the sync (sampled every 2 ms). The policy is perturbed (as by an
optimizer step) before the syncs; a last check compares vLLM's greedy continuation after them with
the partitioned policy's own (HF generate) and with vLLM's before.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import threading
import time

import torch

MODELS = {"tiny": "builtin:tiny", "smollm2": "builtin:smollm2-135m-instruct"}


class RSSPeak:
    """Peak resident memory of this process while the block runs, sampled in a thread."""

    def __init__(self, interval: float = 0.002) -> None:
        import psutil

        self.proc, self.interval = psutil.Process(), interval

    def __enter__(self) -> RSSPeak:
        self.base = self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.interval)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.base) / 2**20


def _present_bytes(params) -> int:
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    return sum(p.ds_numel * p.element_size() for p in params if p.ds_status == ZeroParamStatus.AVAILABLE)


def _timed(fn, repeats: int) -> tuple[float, float]:
    """(median seconds, RSS growth MiB of the slowest-memory run)."""
    times, growth = [], 0.0
    for _ in range(repeats):
        torch.distributed.barrier()
        with RSSPeak() as mem:
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        growth = max(growth, mem.growth_mib)
    return statistics.median(times), growth


def bench(name: str, bucket_bytes: int, repeats: int, engine_on: bool) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lite_ppo.models import resolve_model
    from lite_ppo.strategies.weight_gather import iter_gathered_state
    from lite_ppo.strategies.zero import register_hf_zero3

    rank = torch.distributed.get_rank()
    path = resolve_model(MODELS[name])
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
    }
    token = register_hf_zero3(config)  # from_pretrained loads straight into ZeRO-3 partitions
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    # The engine installs ZeRO-3's fetch/release hooks, so forward passes (HF generate) work on the
    # partitioned parameters, as under Lightning's DeepSpeedStrategy.
    import deepspeed

    ds_engine, *_ = deepspeed.initialize(model=policy, config=config, model_parameters=[], optimizer=None)
    tokenizer = AutoTokenizer.from_pretrained(path)
    params = list({id(p): p for p in policy.parameters()}.values())
    out: dict = {
        "model": name,
        "rank": rank,
        "world": torch.distributed.get_world_size(),
        "params_M": sum(p.ds_numel for p in params) / 1e6,
        "full_fp32_MiB": sum(p.ds_numel * 4 for p in params) / 2**20,
        "bucket_MiB": bucket_bytes / 2**20,
    }

    # The peak of gathered bytes is measured in one extra, untimed pass: walking every parameter
    # after each tensor would otherwise sit inside the timed region.
    peak = {"bytes": 0, "track": False}

    def tracked(iterator):
        for item in iterator:
            if peak["track"]:
                peak["bytes"] = max(peak["bytes"], _present_bytes(params))
            yield item

    def drain(iterator) -> None:
        for _ in tracked(iterator):
            pass

    def untimed_peak(fn) -> float:
        peak.update(bytes=0, track=True)
        torch.distributed.barrier()
        fn()
        peak["track"] = False
        return peak["bytes"] / 2**20

    gather = lambda: drain(iter_gathered_state(policy, bucket_bytes))  # noqa: E731
    out["gather_s"], out["gather_rss_MiB"] = _timed(gather, repeats)
    out["gather_peak_gathered_MiB"] = untimed_peak(gather)

    if engine_on:
        from lite_ppo.rollout.vllm import VLLMEngine

        engine = VLLMEngine(
            dtype="float32",
            kv_cache_space_gib=1,
            max_model_len=512,
            sync_bucket_bytes=bucket_bytes,
            return_logprobs=False,
        )
        start = time.perf_counter()
        engine.setup(policy, tokenizer, path)
        out["engine_startup_s"] = time.perf_counter() - start
        # Change the policy (as an optimizer step would) so that a sync has something to carry.
        from lite_ppo.rollout import HFEngine, SamplingConfig

        prompt = [tokenizer("What is 12 plus 7? Answer:")["input_ids"]]
        greedy = SamplingConfig(n=1, greedy=True, max_new_tokens=8)
        before = engine.generate(prompt, greedy)[0][0].token_ids
        with deepspeed.zero.GatheredParameters(params, modifier_rank=0), torch.no_grad():
            if rank == 0:
                gen = torch.Generator().manual_seed(0)
                for p in params:
                    p.add_(torch.randn(p.shape, generator=gen) * p.float().std().clamp(min=1e-3))
        out["sync_s"], out["sync_rss_MiB"] = _timed(lambda: engine.sync_weights(policy), repeats)

        def push() -> None:
            weights = tracked(iter_gathered_state(policy, bucket_bytes, copy=True))
            engine.llm.collective_rpc(
                "reload_weights", kwargs=dict(weights_iterator=weights, is_checkpoint_format=True)
            )
            engine.llm.reset_prefix_cache()

        out["push_s"], out["push_rss_MiB"] = _timed(push, repeats)
        out["push_peak_gathered_MiB"] = untimed_peak(push)

        # sanity: after the sync vLLM continues a prompt greedily like the (changed) partitioned policy
        hf = HFEngine()
        hf.setup(policy, tokenizer, path)
        after = engine.generate(prompt, greedy)[0][0].token_ids
        out["greedy_equal_to_policy"] = after == hf.generate(prompt, greedy)[0][0].token_ids
        out["greedy_changed_by_sync"] = after != before
        # No engine.close(): vLLM's shutdown destroys torch.distributed's default process group,
        # which here is the training one. The process ends after this model.
    del ds_engine, token
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", default="tiny", help="comma-separated; with the engine on, one per launch (see below)"
    )
    parser.add_argument("--bucket-mb", type=float, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-engine", action="store_true", help="gather only")
    parser.add_argument("--json", default=None, help="also write the results (rank 0) to this file")
    args = parser.parse_args()
    if not args.no_engine and "," in args.models:
        # a second in-process vLLM engine would need the first one shut down, and vLLM's shutdown
        # destroys the default process group (the training one): one model per launch
        parser.error("with the engine on, benchmark one model per launch (--models tiny, then --models smollm2)")

    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    # DeepSpeed's shared-memory CPU all-reduce is a C++ extension compiled on first use (minutes);
    # the benchmark measures gloo collectives without it.
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    import deepspeed

    deepspeed.init_distributed("gloo")
    results = []
    for name in args.models.split(","):
        result = bench(name, int(args.bucket_mb * 2**20), args.repeats, not args.no_engine)
        results.append(result)
        print(json.dumps(result), flush=True)
    if args.json and torch.distributed.get_rank() == 0:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
