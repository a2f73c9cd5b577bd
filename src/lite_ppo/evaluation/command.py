"""``lite-ppo evaluate``: benchmark a HF folder, a builtin model or a training checkpoint.

    lite-ppo evaluate --model builtin:smollm2-135m-instruct --benchmarks math500,gsm8k --out eval_out
    lite-ppo evaluate --model runs/ckpt/last.ckpt --benchmarks paper \\
        --out eval_out --engine vllm --n 8 --temperature 0.6 --max-new-tokens 4096
    lite-ppo evaluate --model runs/ckpt/last.ckpt --config configs/recipes/lite_ppo.yaml --config my_model.yaml ...

Writes ``OUT/metrics.json`` (every metric per benchmark plus the averages and the settings),
``OUT/metrics.md`` (benchmark x metric table) and ``OUT/responses.jsonl`` (one line per response:
benchmark, id, sample, prompt, response, answer, extracted, status, correct, length, truncated).

The prompt formatter and the reward are the training ones: pass the training YAML with ``--config``
and its ``rollout.prompt``, ``rollout.reward``, ``rollout.engine`` and ``rollout.eval_sampling``
are used (flags given on the command line win).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from pathlib import Path
from typing import Any

from lite_ppo.errors import OneLineParser

DEFAULT_BENCHMARK_CONFIG = "configs/eval/benchmarks.yaml"
DEFAULT_MAX_NEW_TOKENS = 1024


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="lite-ppo evaluate",
        description="Evaluate a model (HF folder, builtin:<name>, or a .ckpt file or DeepSpeed checkpoint folder "
        "from lite-ppo fit) on math benchmarks; writes metrics.json, metrics.md and responses.jsonl to --out.",
    )
    parser.add_argument(
        "--model",
        required=True,
        help="HF model folder, builtin:<name>, or a Lightning checkpoint "
        "(.ckpt file, or a DeepSpeed ZeRO-3 checkpoint folder)",
    )
    parser.add_argument(
        "--base-model",
        default=None,
        help="for a .ckpt: the model folder/builtin giving architecture and tokenizer "
        "(default: the one recorded in it)",
    )
    parser.add_argument(
        "--benchmarks",
        default=None,
        help="benchmark YAML, or comma-separated dataset names (math500,aime24,...; 'paper' = the paper's six); "
        f"default {DEFAULT_BENCHMARK_CONFIG} when it exists, else the built-in list",
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        help="folder of benchmark files named like the registry's (aime24.jsonl, ...); wins over the shipped and "
        "cached copies (else the YAML's data_dir, else $LITE_PPO_EVAL_DIR)",
    )
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        help="training YAML(s) whose rollout.{prompt,reward,engine,eval_sampling} to use (repeatable, later wins)",
    )
    parser.add_argument(
        "--engine", choices=["hf", "vllm"], default=None, help="rollout engine (default: the config's, else hf)"
    )
    parser.add_argument("--n", type=int, default=None, help="responses per problem (default 1)")
    parser.add_argument("--temperature", type=float, default=None, help="sampling temperature; 0 = greedy (default 0)")
    parser.add_argument("--top-p", type=float, default=None, help="nucleus sampling (default 1.0)")
    parser.add_argument("--top-k", type=int, default=None, help="top-k sampling, <= 0 disables (default 0)")
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="response token limit (default: the config's rollout.eval_sampling, else its rollout.sampling, "
        f"else the builtin model's own, 32 for builtin:tiny-arith, else {DEFAULT_MAX_NEW_TOKENS})",
    )
    parser.add_argument(
        "--pass-k",
        type=int,
        nargs="+",
        default=None,
        help="k of the reported pass@k (default: powers of two up to n, and n)",
    )
    parser.add_argument("--limit", type=int, default=None, help="evaluate only the first N problems of each benchmark")
    parser.add_argument(
        "--batch-size", type=int, default=None, help="problems per generation call (default 16 for hf, 256 for vllm)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        default="float32",
        help="dtype the policy is loaded in; the vLLM engine runs in it too unless --config names the engine",
    )
    parser.add_argument(
        "--prompt-style",
        choices=["auto", "chat", "plain"],
        default=None,
        help="override the prompt style (default: the config's, else auto)",
    )
    parser.add_argument(
        "--require-boxed",
        action="store_true",
        default=None,
        help="score answers outside \\boxed{} as no_box (default: the config's reward)",
    )
    parser.add_argument("--vllm-kv-cache-gib", type=float, default=None, help="vLLM CPU KV-cache size (GiB)")
    parser.add_argument(
        "--vllm-max-model-len",
        type=int,
        default=None,
        help="vLLM context length (default: prompt + max_new_tokens bound by the model)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


# ------------------------------------------------------------------ training-config reading
# The ``rollout:`` section of a training config, typed as ``lite_ppo.callbacks.Rollout``'s arguments
# (LightningCLI parses that section from them; a test keeps the two equal). The command uses the
# engine, prompt, reward and sampling; the training-only keys are accepted so that any training
# config reads.
def rollout_section_parser():
    """A jsonargparse parser of the ``rollout:`` sections of training YAMLs (``--config``, repeatable:
    later files win, merged as LightningCLI merges them, ``class_path`` included)."""
    from typing import Literal

    from jsonargparse import ActionConfigFile, ArgumentParser

    from lite_ppo.data.prompts import PromptFormatter
    from lite_ppo.rewards import MathVerifyReward
    from lite_ppo.rollout.engine import RolloutEngine, SamplingConfig

    parser = ArgumentParser(prog="lite-ppo evaluate --config", exit_on_error=False, env_prefix=False, default_env=False)
    parser.add_argument("--config", action=ActionConfigFile)
    for name, typehint, default in (
        ("engine", RolloutEngine | None, None),
        ("sampling", SamplingConfig | None, None),
        ("eval_sampling", SamplingConfig | None, None),
        ("reward", MathVerifyReward | None, None),
        ("prompt", PromptFormatter | None, None),
        ("seed", int | None, None),
        ("max_refill_rounds", int, 0),
        ("max_prompt_tokens", int | None, None),
        ("overlong_prompts", Literal["drop", "refuse"], "drop"),
    ):
        parser.add_argument(f"--rollout.{name}", type=typehint, default=default)
    return parser


def read_rollout_section(paths: list[str], overrides: list[str] = ()):
    """The parsed (not yet instantiated) ``rollout:`` section of the training YAMLs ``paths``, then
    ``overrides`` (``--rollout.<key>=<value>`` arguments, as on ``lite-ppo fit``'s command line)."""
    import argparse
    import json

    import yaml
    from jsonargparse import get_loader

    from lite_ppo.errors import UserError, parser_message

    load = get_loader("yaml")  # LightningCLI's loader: the same values as fit reads
    argv: list[str] = []
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as err:
            raise UserError(f"--config {path}: {err.strerror or err}") from err
        except UnicodeDecodeError as err:
            raise UserError(f"--config {path}: not UTF-8 text (byte {err.start}); save it as UTF-8") from None
        try:
            data = load(text) or {}
        except yaml.YAMLError as err:
            raise UserError(f"--config {path}: cannot read it as YAML ({err})") from None
        if not isinstance(data, dict):
            raise UserError(f"--config {path}: expected a YAML mapping (a training config), got {type(data).__name__}")
        section = data.get("rollout") or {}
        if not isinstance(section, dict):
            raise UserError(f"--config {path}: rollout: expected a mapping, got {section!r}")
        argv += ["--config", json.dumps({"rollout": section})]
    parser = rollout_section_parser()
    try:
        return parser, parser.parse_args(argv + list(overrides))
    except argparse.ArgumentError as err:
        raise UserError(f"--config {', '.join(paths)}: {parser_message(str(err))}") from err


def rollout_from_args(args: argparse.Namespace):
    """``(producer, sampling)``: the training config's ``rollout.engine``, ``prompt``, ``reward`` and
    ``eval_sampling`` (``--config``), with the command-line flags winning."""
    from lite_ppo.errors import UserError, parser_message
    from lite_ppo.rollout.producer import RolloutProducer

    overrides = []
    if args.prompt_style:
        overrides.append(f"--rollout.prompt.style={args.prompt_style}")
    if args.require_boxed:
        overrides.append("--rollout.reward.require_boxed=true")
    parser, config = read_rollout_section(args.config, overrides)
    engine_class = (config.rollout.engine or {}).get("class_path", "")
    configured = None if not engine_class else ("vllm" if "vllm" in engine_class.lower() else "hf")
    choice = args.engine or configured or "hf"
    engine_args: dict[str, Any] = {}
    if choice == "vllm":
        if configured != "vllm":
            # The policy's dtype, not vLLM's "auto" (which runs float32 checkpoints in bfloat16):
            # the engine then computes what the loaded policy computes.
            if args.dtype not in ("float32", "bfloat16"):
                raise UserError(
                    f"--dtype {args.dtype} is not supported by the vLLM engine: use float32 or bfloat16, or --engine hf"
                )
            engine_args["dtype"] = args.dtype
        if args.vllm_kv_cache_gib is not None:
            engine_args["kv_cache_space_gib"] = args.vllm_kv_cache_gib
        if args.vllm_max_model_len is not None:
            engine_args["max_model_len"] = args.vllm_max_model_len
    if choice == configured:
        for key, value in engine_args.items():  # the flags win over the config's engine arguments
            config[f"rollout.engine.init_args.{key}"] = value
    else:
        config.rollout.engine = None  # not the configured engine: not built at all
    try:
        rollout = parser.instantiate(config).rollout
    except ValueError as err:  # a constructor's check ("SamplingConfig.top_p must be in (0, 1], got 2.0")
        if isinstance(err, UserError):
            raise
        raise UserError(f"invalid setting in --config {', '.join(args.config)}: {parser_message(str(err))}") from err
    engine = rollout.engine
    if engine is None and choice == "vllm":
        from lite_ppo.rollout.vllm import VLLMEngine

        engine = VLLMEngine(**engine_args)
    elif engine is None:
        from lite_ppo.rollout.hf import HFEngine

        engine = HFEngine(batch_size=args.batch_size or 16)
    producer = RolloutProducer(engine=engine, reward=rollout.reward, prompt=rollout.prompt)
    return producer, sampling_from_args(args, rollout.eval_sampling, rollout.sampling)


def sampling_from_args(args: argparse.Namespace, eval_sampling=None, sampling=None):
    """Command-line flags over the config's ``rollout.eval_sampling`` over greedy defaults (one
    response, the config's training ``max_new_tokens``, else the builtin model's own limit, else
    ``DEFAULT_MAX_NEW_TOKENS``)."""
    from lite_ppo.errors import UserError
    from lite_ppo.rollout.engine import SamplingConfig

    if eval_sampling is not None:
        values = dataclasses.asdict(eval_sampling)
    else:
        # The Rollout callback's default: greedy, one response, the training response limit.
        limit = (
            sampling.max_new_tokens if sampling is not None else builtin_max_new_tokens(getattr(args, "model", None))
        )
        values = {"n": 1, "temperature": 0.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": limit, "greedy": True}
    for key in ("n", "temperature", "top_p", "top_k", "max_new_tokens"):
        value = getattr(args, key)
        if value is not None:
            values[key] = value
    if args.temperature is not None:
        values["greedy"] = args.temperature == 0
    if values["greedy"]:
        if values["n"] > 1:
            raise UserError(
                "greedy decoding (temperature 0) gives n identical responses; pass --temperature > 0 with --n > 1"
            )
        values["temperature"] = 0.0
    try:
        return SamplingConfig(**values)
    except ValueError as err:  # "SamplingConfig.n must be >= 1": name the flag, or the config's key
        field = re.match(r"SamplingConfig\.(\w+)", str(err))
        if field is None:
            raise UserError(str(err)) from err
        key = field.group(1)
        given = getattr(args, key, None) is not None
        where = f"--{key.replace('_', '-')}" if given else f"rollout.eval_sampling.{key} (--config)"
        raise UserError(str(err).replace(field.group(0), where, 1)) from err


def builtin_max_new_tokens(model: str | None) -> int:
    """The response limit of a ``builtin:`` model (:attr:`Builtin.max_new_tokens`), else ``DEFAULT_MAX_NEW_TOKENS``."""
    from lite_ppo.models.registry import BUILTIN_PREFIX, BUILTINS

    builtin = BUILTINS.get(model[len(BUILTIN_PREFIX) :]) if model and model.startswith(BUILTIN_PREFIX) else None
    return builtin.max_new_tokens if builtin is not None and builtin.max_new_tokens else DEFAULT_MAX_NEW_TOKENS


def check_pass_k(ks: list[int] | None, n: int, where: str) -> None:
    """Every k of ``--pass-k`` is in 1..n (pass@k draws k of the n responses of a problem): checked
    before any model loads or generates, so a wrong k costs nothing.

    Raises:
        UserError: one line naming the k, n and where n came from (``where``).
    """
    from lite_ppo.errors import UserError

    bad = [k for k in ks or () if not 1 <= k <= n]
    if bad:
        raise UserError(
            f"--pass-k {' '.join(map(str, bad))}: pass@k needs 1 <= k <= n, and n is {n} responses per problem "
            f"({where}); give k <= {n} or more responses (--n with --temperature > 0)"
        )


# ------------------------------------------------------------------ the command
def run(args: argparse.Namespace) -> dict[str, Any]:
    """Evaluate as ``args`` say; returns the metrics.json payload."""
    # vLLM on CPU must run in-process (in-place weight updates); harmless for HF.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from lite_ppo.errors import UserError
    from lite_ppo.evaluation.benchmarks import apply_limit, load_benchmark_config, load_benchmarks, resolve_data_dir
    from lite_ppo.evaluation.runner import evaluate_and_report, load_policy_module

    # The settings, then the model's path, then the benchmarks: a mistake is said before any
    # benchmark is looked for or fetched.
    producer, sampling = rollout_from_args(args)
    n_from = "--n" if args.n is not None else "--config's rollout.eval_sampling.n" if args.config else "the default"
    check_pass_k(args.pass_k, sampling.n, n_from)
    if not str(args.model).startswith("builtin:") and not Path(args.model).expanduser().exists():
        raise UserError(
            f"--model {args.model}: no such file or folder (give a Hugging Face folder, builtin:NAME, "
            "a .ckpt file or a DeepSpeed checkpoint folder)"
        )
    source = args.benchmarks
    if source is None and Path(DEFAULT_BENCHMARK_CONFIG).is_file():
        source = DEFAULT_BENCHMARK_CONFIG
    specs, configured_dir = load_benchmark_config(source)
    specs = apply_limit(specs, args.limit)
    data_dir = resolve_data_dir(args.data_dir, configured_dir)
    benchmarks = load_benchmarks(specs, data_dir)  # every file is checked before the model loads

    engine, prompt, reward = producer.engine, producer.prompt, producer.reward
    engine_name = type(engine).__name__
    batch_size = args.batch_size or (256 if "vllm" in engine_name.lower() else 16)

    module = load_policy_module(args.model, base_model=args.base_model, dtype=args.dtype)
    module.eval()
    info = {
        "model": args.model,
        "model_path": module.model_path,
        "engine": engine_name,
        "sampling": {
            k: getattr(sampling, k) for k in ("n", "greedy", "temperature", "top_p", "top_k", "max_new_tokens")
        },
        "prompt": {
            "style": prompt.resolved_style(module.tokenizer),
            "instruction": prompt.instruction,
            "system_prompt": prompt.system_prompt,
        },
        "reward": {
            "class": type(reward).__name__,
            "require_boxed": getattr(reward, "require_boxed", None),
            "timeout_seconds": getattr(reward, "timeout_seconds", None),
        },
        "data_dir": None if data_dir is None else str(data_dir),
        "benchmark_files": {spec.name: spec.file for spec, _ in benchmarks},
        "limits": {spec.name: spec.limit for spec, _ in benchmarks},
        "averaged": [spec.name for spec, _ in benchmarks if spec.in_average],
        "seed": args.seed,
    }
    results, info = evaluate_and_report(
        module,
        producer,
        benchmarks,
        sampling,
        args.out,
        info,
        title=lambda wall: f"{args.model} ({engine_name}, {wall:.1f} s)",
        batch_size=batch_size,
        seed=args.seed,
        ks=args.pass_k,
        progress=not args.no_progress,
    )
    return {**info, **results}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run(args)
    return 0
