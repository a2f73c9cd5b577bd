"""Generation throughput of the vLLM engine and the HF engine on the same model, prompts and sampling.

For each model it prints tokens/s of generation (after a warm-up) for vLLM
(:class:`lite_ppo.rollout.vllm.VLLMEngine`, once per ``--vllm-dtype``: bfloat16 and float32 by
default) and for HF (:class:`lite_ppo.rollout.hf.HFEngine`, or plain ``model.generate`` when that
engine is missing, on the float32 policy), vLLM's startup time and first (cold) generate, and the
time of one weight sync (float32 policy -> vLLM, in place). Each model runs in its own process;
its vLLM engines are built one after the other in that process (each closed before the next).

Usage (the defaults: the tiny test model and SmolLM2-135M-Instruct)::

    python benchmarks/bench_engines.py
    python benchmarks/bench_engines.py --model builtin:tiny --prompts 4 --n 2 --max-new-tokens 16
    python benchmarks/bench_engines.py --model /path/to/hf/folder --json results.json
    python benchmarks/bench_engines.py --prompts 8 --n 4 --max-new-tokens 128   # a few minutes on 2 cores
    python benchmarks/bench_engines.py --engines vllm --vllm-dtype float32 --compiled   # torch.compile'd vLLM

``--compiled`` builds the vLLM engines with ``enforce_eager: false``: compare its startup (first time,
then with vLLM's compile cache warm: run it twice) and tokens/s with an eager run's.

``--model`` takes a local HF folder or a ``builtin:`` name (resolved by
``lite_ppo.models.resolve_model``). Sampling defaults are the paper's (temperature 0.99,
top_p 0.99, top_k 100, 8 samples per prompt). Prompts are 1-2-digit additions in the model's
chat template when it has one.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

DEFAULT_MODELS = ["builtin:tiny", "builtin:smollm2-135m-instruct"]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model",
        action="append",
        help="HF folder or builtin:<name>; repeat for several (default: tiny and SmolLM2-135M)",
    )
    p.add_argument("--engines", default="vllm,hf", help="comma-separated subset of vllm,hf")
    p.add_argument("--prompts", type=int, default=16, help="number of prompts")
    p.add_argument("--n", type=int, default=8, help="samples per prompt")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.99)
    p.add_argument("--top-p", type=float, default=0.99)
    p.add_argument("--top-k", type=int, default=100)
    p.add_argument(
        "--vllm-dtype",
        default="bfloat16,float32",
        help="comma-separated vLLM dtypes (auto, bfloat16, float32); one engine each",
    )
    p.add_argument(
        "--hf-dtype",
        default="float32",
        choices=["bfloat16", "float32"],
        help="dtype of the HF policy (the trainer's weights)",
    )
    p.add_argument("--compiled", action="store_true", help="vLLM with enforce_eager: false (torch.compile)")
    p.add_argument("--hf-batch-size", type=int, default=16, help="prompts per HF generate call")
    p.add_argument("--kv-cache-gib", type=float, default=2.0)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument(
        "--no-summary", action="store_true", help=argparse.SUPPRESS
    )  # per-model child processes: the parent prints it
    return p.parse_args(argv)


def make_prompts(tokenizer, count: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        question = f"What is {rng.randint(0, 99)} + {rng.randint(0, 99)}? Put your final answer within \\boxed{{}}."
        if getattr(tokenizer, "chat_template", None):
            ids = tokenizer.apply_chat_template(
                [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True, return_dict=False
            )
        else:
            ids = tokenizer.encode(question)
        prompts.append(list(ids))
    return prompts


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _count(groups) -> int:
    return sum(len(g.token_ids) for group in groups for g in group)


def bench_one(args: argparse.Namespace, model_name: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lite_ppo.models import resolve_model
    from lite_ppo.rollout.engine import SamplingConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    path = resolve_model(model_name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    dtype = torch.bfloat16 if args.hf_dtype == "bfloat16" else torch.float32
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    prompts = make_prompts(tokenizer, args.prompts, args.seed)
    sampling = SamplingConfig(
        n=args.n, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, max_new_tokens=args.max_new_tokens
    )
    warmup = SamplingConfig(
        n=2,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        max_new_tokens=min(16, args.max_new_tokens),
    )
    result = dict(
        model=model_name,
        path=path,
        parameters=sum(p.numel() for p in policy.parameters()),
        prompts=len(prompts),
        n=args.n,
        max_new_tokens=args.max_new_tokens,
        sampling=dict(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k),
        torch_threads=torch.get_num_threads(),
    )
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]

    if "hf" in engines:
        engine = _hf_engine(args.hf_batch_size)
        engine.setup(policy, tokenizer, path)
        engine.generate(prompts[:2], warmup, seed=args.seed)
        groups, seconds = _timed(lambda: engine.generate(prompts, sampling, seed=args.seed))
        tokens = _count(groups)
        result["hf"] = dict(
            engine=type(engine).__name__,
            dtype=args.hf_dtype,
            tokens=tokens,
            seconds=seconds,
            tokens_per_s=tokens / seconds,
        )
        _print_line(model_name, "hf", result["hf"])

    if "vllm" in engines:
        from lite_ppo.rollout.vllm import VLLMEngine

        # One engine at a time in this process (each is closed before the next is built).
        for vllm_dtype in _dtypes(args.vllm_dtype):
            engine = VLLMEngine(
                dtype=vllm_dtype, kv_cache_space_gib=args.kv_cache_gib, seed=args.seed, enforce_eager=not args.compiled
            )
            engine.setup(policy, tokenizer, path)
            _, first_generate = _timed(lambda engine=engine: engine.generate(prompts[:2], warmup, seed=args.seed))
            groups, seconds = _timed(lambda engine=engine: engine.generate(prompts, sampling, seed=args.seed))
            tokens = _count(groups)
            engine.sync_weights(policy)  # the first sync also pays one-off costs; report the second
            first_sync = engine.last_sync_seconds
            engine.sync_weights(policy)
            key = _vllm_key(vllm_dtype, args.vllm_dtype) + ("-compiled" if args.compiled else "")
            result[key] = dict(
                engine="VLLMEngine",
                dtype=str(engine.engine_dtype).replace("torch.", ""),
                tokens=tokens,
                seconds=seconds,
                tokens_per_s=tokens / seconds,
                startup_s=engine.startup_seconds,
                first_generate_s=first_generate,
                sync_s=engine.last_sync_seconds,
                first_sync_s=first_sync,
                sync_buckets=engine.last_sync_buckets,
            )
            _print_line(model_name, key, result[key])
            engine.close()
    return result


class _PlainGenerate:
    """``model.generate`` behind the engine interface, for when HFEngine is not available."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size

    def setup(self, policy, tokenizer, model_path) -> None:
        self.policy, self.tokenizer = policy, tokenizer

    def generate(self, prompt_token_ids, sampling, seed=None):
        import torch

        from lite_ppo.rollout.engine import Generation

        if seed is not None:
            torch.manual_seed(seed)
        eos = self.tokenizer.eos_token_id
        out = []
        for start in range(0, len(prompt_token_ids), self.batch_size):
            chunk = prompt_token_ids[start : start + self.batch_size]
            width = max(map(len, chunk))
            ids = torch.full((len(chunk), width), eos, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, p in enumerate(chunk):
                ids[row, width - len(p) :] = torch.tensor(p)
                mask[row, width - len(p) :] = 1
            with torch.no_grad():
                seqs = self.policy.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    do_sample=True,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    top_k=sampling.top_k if sampling.top_k > 0 else None,
                    max_new_tokens=sampling.max_new_tokens,
                    num_return_sequences=sampling.n,
                    eos_token_id=eos,
                    pad_token_id=eos,
                )[:, width:].tolist()
            for p in range(len(chunk)):
                group = []
                for tokens in seqs[p * sampling.n : (p + 1) * sampling.n]:
                    end = tokens.index(eos) + 1 if eos in tokens else len(tokens)
                    group.append(Generation(tokens[:end], eos in tokens))
                out.append(group)
        return out


def _dtypes(spec: str) -> list[str]:
    dtypes = [d.strip() for d in spec.split(",") if d.strip()]
    bad = [d for d in dtypes if d not in ("auto", "bfloat16", "float32")]
    if bad or not dtypes:
        raise SystemExit(f"--vllm-dtype: expected a comma-separated list of auto, bfloat16, float32; got {spec!r}")
    return dtypes


def _vllm_key(dtype: str, spec: str) -> str:
    """``vllm`` when one dtype is benchmarked, else ``vllm-<dtype>``."""
    return "vllm" if len(_dtypes(spec)) == 1 else f"vllm-{dtype}"


def _hf_engine(batch_size: int):
    try:
        from lite_ppo.rollout.hf import HFEngine
    except ImportError:
        return _PlainGenerate(batch_size)
    return HFEngine(batch_size=batch_size)


def _print_line(model: str, engine: str, r: dict) -> None:
    extra = ""
    if engine.startswith("vllm"):
        extra = (
            f"  startup {r['startup_s']:.1f} s, first generate {r['first_generate_s']:.1f} s,"
            f"  sync {r['sync_s']:.3f} s (first {r['first_sync_s']:.3f} s, {r['sync_buckets']} buckets)"
        )
    print(
        f"[{model}] {engine:<14} {r['dtype']:<8} {r['tokens']:>7} tokens in {r['seconds']:7.2f} s = "
        f"{r['tokens_per_s']:8.1f} tokens/s{extra}",
        flush=True,
    )


def main(argv=None) -> None:
    args = parse_args(argv)
    models = args.model or DEFAULT_MODELS
    if len(models) == 1:
        results = [bench_one(args, models[0])]
    else:  # one process per model: each builds its own in-process vLLM engine
        results = []
        passthrough = [a for a in (argv if argv is not None else sys.argv[1:])]
        passthrough = _strip_option(_strip_option(passthrough, "--model"), "--json")
        for model in models:
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
                out = tmp.name
            cmd = [
                sys.executable,
                os.path.abspath(__file__),
                "--model",
                model,
                "--json",
                out,
                "--no-summary",
                *passthrough,
            ]
            proc = subprocess.run(cmd, check=False)
            if proc.returncode != 0:
                print(f"[{model}] failed with exit code {proc.returncode}", flush=True)
                continue
            with open(out) as f:
                results.extend(json.load(f))
            os.unlink(out)
    if not args.no_summary:
        print("\nsummary (generation tokens/s after warm-up; sync = one in-place weight push into vLLM)")
        for r in results:
            print(_summary_line(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


def _summary_line(r: dict) -> str:
    engines = [k for k in r if k == "hf" or k.startswith("vllm")]
    parts = []
    for e in engines:
        part = f"{e} {r[e]['tokens_per_s']:.1f} tok/s"
        if e != "hf" and "hf" in r:
            part += f" ({r[e]['tokens_per_s'] / r['hf']['tokens_per_s']:.2f}x HF)"
        if e != "hf":
            part += f", sync {r[e]['sync_s']:.3f} s, startup {r[e]['startup_s']:.1f} s"
        parts.append(part)
    return f"  {r['model']}: " + "; ".join(parts)


def _strip_option(argv: list[str], name: str) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == name:
            skip = True
            continue
        if a.startswith(name + "="):
            continue
        out.append(a)
    return out


if __name__ == "__main__":
    main()
