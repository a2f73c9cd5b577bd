"""The two ways a LoRA policy reaches vLLM (``VLLMEngine(lora_sync)``), side by side: the time of a
sync, the generation throughput that follows, and how far the engine's log-probs are from the
policy's.

    python benchmarks/bench_lora_sync.py                                 # SmolLM2-135M, r 16, 7 projections
    python benchmarks/bench_lora_sync.py --model builtin:tiny --rank 4   # seconds
    python benchmarks/bench_lora_sync.py --modes adapter --prompts 8 --n 8 --max-new-tokens 128

The policy is the model with peft adapters (``configs/lora.yaml``'s targets, rank ``--rank``, alpha
2 x rank), their ``B`` set to random non-zero values (peft starts them at 0, where both modes are
trivially exact). For each mode in turn (one float32 engine each, built in this process, closed
before the next) it prints:

- ``sync s``: ``VLLMEngine.sync_weights`` (median of ``--syncs``; the adapters move before each):
  ``merged`` sends ``W + scale * B @ A`` under the base names, ``adapter`` writes the adapters to a
  folder and has vLLM load them in place;
- ``tok/s``: generated tokens per second of ``--prompts`` x ``--n`` samples at the paper's sampling,
  after one warm-up generate (median of ``--repeats``); ``adapter`` runs the LoRA matmuls at every
  token, ``merged`` the base architecture;
- ``max |dlogp|``: the largest difference between the engine's log-prob of a sampled token and the
  policy's ``log_softmax(logits / T)`` over the last generate's samples (float rounding when the
  engine runs the policy's function).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_policy(model_path: str, rank: int, seed: int):
    """The model with adapters of ``rank`` on TARGETS, ``B`` random (as after training), in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lite_ppo.models import resolve_model
    from lite_ppo.models.lora import LoraSettings

    path = resolve_model(model_path)
    settings = LoraSettings(r=rank, alpha=2 * rank, target_modules=tuple(TARGETS))
    policy = settings.wrap(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32))
    move_adapters(policy, seed)
    return policy.eval(), AutoTokenizer.from_pretrained(path), path


@torch.no_grad()
def move_adapters(policy: torch.nn.Module, seed: int) -> None:
    """Random non-zero adapters: ``B`` drawn at scale 0.01 (``A`` keeps peft's initialisation)."""
    generator = torch.Generator().manual_seed(seed)
    for name, param in policy.named_parameters():
        if "lora_B" in name:
            param.copy_(torch.randn(param.shape, generator=generator) * 0.01)


@torch.no_grad()
def worst_logprob_gap(policy, prompts, groups, temperature: float) -> float:
    worst = 0.0
    for prompt, group in zip(prompts, groups):
        for gen in group:
            logits = policy(torch.tensor([prompt + gen.token_ids])).logits[0, len(prompt) - 1 : -1]
            trainer = torch.log_softmax(logits.float() / temperature, -1)
            picked = trainer.gather(-1, torch.tensor(gen.token_ids)[:, None])[:, 0]
            worst = max(worst, (picked - torch.tensor(gen.logprobs)).abs().max().item())
    return worst


def bench_mode(mode: str, args: argparse.Namespace) -> dict:
    from bench_engines import make_prompts

    from lite_ppo.rollout import SamplingConfig
    from lite_ppo.rollout.vllm import VLLMEngine

    policy, tokenizer, path = lora_policy(args.model, args.rank, args.seed)
    prompts = make_prompts(tokenizer, args.prompts, args.seed)
    sampling = SamplingConfig(n=args.n, temperature=0.99, top_p=0.99, top_k=100, max_new_tokens=args.max_new_tokens)
    engine = VLLMEngine(dtype="float32", kv_cache_space_gib=args.kv_cache_gib, max_model_len=2048, lora_sync=mode)
    engine.setup(policy, tokenizer, path)
    try:
        syncs = []
        for i in range(args.syncs):
            move_adapters(policy, args.seed + 1 + i)
            engine.sync_weights(policy)
            syncs.append(engine.last_sync_seconds)
        engine.generate(prompts, sampling, seed=args.seed)  # warm-up
        rates = []
        for i in range(args.repeats):
            start = time.perf_counter()
            groups = engine.generate(prompts, sampling, seed=args.seed + 1 + i)
            tokens = sum(len(g.token_ids) for group in groups for g in group)
            rates.append(tokens / (time.perf_counter() - start))
        gap = worst_logprob_gap(policy, prompts, groups, sampling.temperature)
    finally:
        engine.close()
    return {"mode": mode, "sync_s": statistics.median(syncs), "tok_s": statistics.median(rates), "gap": gap}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="builtin:smollm2-135m-instruct")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--modes", nargs="+", choices=["merged", "adapter"], default=["merged", "adapter"])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--syncs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kv-cache-gib", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rows = [bench_mode(mode, args) for mode in args.modes]
    workload = f"{args.prompts} prompts x {args.n} samples x {args.max_new_tokens} tokens"
    threads = torch.get_num_threads()
    print(f"\n{args.model}, LoRA r {args.rank} on {len(TARGETS)} projections, {workload}, {threads} threads")
    print(f"{'mode':>8} | {'sync s':>7} | {'tok/s':>7} | {'max |dlogp|':>11}")
    for row in rows:
        print(f"{row['mode']:>8} | {row['sync_s']:7.3f} | {row['tok_s']:7.1f} | {row['gap']:11.2e}")


if __name__ == "__main__":
    main()
