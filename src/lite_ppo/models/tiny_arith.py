r"""A tiny model that has learned some arithmetic: the smoke model on which RL visibly learns.

``builtin:tiny`` is random, so it never answers correctly: every group is all-wrong, every
advantage is 0 and a smoke fit shows wiring only. ``builtin:tiny-arith`` starts from the same
tiny Llama (same tokenizer, head_dim 64 so vLLM's CPU kernel accepts it) and is pre-trained
briefly, with plain supervised next-token loss, on the built-in easy tier, in exactly the form
training prompts take (the default :class:`~lite_ppo.data.prompts.PromptFormatter`, chat style).
The answer it learns is a short column-by-column working, units first, then the boxed result
(what the reward reads; leading zeros are fine for math-verify)::

    prompt:  <|im_start|>user\nWhat is 23 + 48?\nPlease reason step by step, and put your final
             answer within \boxed{}.<|im_end|>\n<|im_start|>assistant\n
    answer:  3+8+0=11 2+4+1=07 \boxed{071}<|im_end|>

Each token of this working is a copy or a one-digit sum at a fixed distance, which a 2-layer
model picks up in a few hundred steps; the bare answer ``\boxed{71}`` (every digit depends on
both operands and the carries) is not learned at all in that budget.

The pre-training is deliberately short, so the model always writes the working and a boxed number
but gets digits wrong part of the time, so that many groups of 8 samples mix right and wrong
answers (the shipped weights' measured accuracy and mix: docs/benchmarks.md, "The smoke model").
That is the signal a critic-free PPO needs: a few Lite PPO steps raise the
training reward, and correctness-dependent techniques (dynamic sampling, group filtering) have
something to act on.

The trained weights ship with the package (``shipped/tiny-arith/``, with their
SHA-256 in ``shipped/tiny-arith/lite_ppo_shipped.json``): ``builtin:tiny-arith`` copies them into the
model cache and checks the checksum (:func:`install_tiny_arith_model`), so every machine trains
and evaluates the same bits. The build below stays for provenance
(``lite-ppo prepare-model builtin:tiny-arith --rebuild``): it is deterministic on one machine (fixed
seeds, one CPU thread, deterministic algorithms), but a CPU with other vector units rounds the 500
steps differently and so ends at other weights; that is why the result is shipped rather than built.

Example:
    >>> from lite_ppo.models.tiny_arith import install_tiny_arith_model
    >>> path = install_tiny_arith_model("/tmp/tiny-arith")   # doctest: +SKIP
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from lite_ppo.models import pretraining
from lite_ppo.models.pretraining import (
    SHIPPED_MANIFEST,
    deterministic_cpu,
    install_shipped,
    supervised_pretrain,
    weights_digest,
)

__all__ = [
    "ARITH_CONFIG",
    "DEFAULT_PRETRAIN",
    "SHIPPED_DIR",
    "SHIPPED_MANIFEST",
    "PretrainConfig",
    "arith_examples",
    "build_tiny_arith_model",
    "install_tiny_arith_model",
    "pretrain",
    "shipped_digest",
    "weights_digest",
    "worked_answer",
    "write_shipped_manifest",
]


@dataclass(frozen=True)
class PretrainConfig:
    """The supervised pre-training of ``builtin:tiny-arith`` (changing a value changes the model:
    bump the builtin's version in the registry).

    Args:
        steps: optimizer steps; few on purpose, so the model stays imperfect.
        batch_size: examples per step.
        lr: peak AdamW learning rate (linear warm-up over ``warmup_steps``, then constant).
        warmup_steps: warm-up length.
        num_problems: distinct easy problems the examples cycle through.
        seed: weight initialization and example order.
    """

    steps: int = 500
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 20
    num_problems: int = 4096
    seed: int = 0


DEFAULT_PRETRAIN = PretrainConfig()
# The tiny Llama of ``builtin:tiny`` with 4 query and 4 key/value heads of 64 (attention width 256
# on hidden 128): the working needs several copies at once, which 2 heads learn far more slowly.
ARITH_CONFIG = {"num_attention_heads": 4, "num_key_value_heads": 4}
# The pre-training problems come from their own stream of the synthetic easy tier, so they are
# neither the training batches nor the held-out problems of any data seed.
PRETRAIN_STREAM = "tiny-arith-pretrain"
# The trained model as the package ships it, and the file there that records its checksum and provenance.
SHIPPED_DIR = Path(__file__).resolve().parent / "shipped" / "tiny-arith"


def worked_answer(expression: str) -> str:
    """The response ``builtin:tiny-arith`` learns for an easy-tier expression ``"a + b"`` / ``"a - b"``.

    Two columns, units then tens, each ``x op y op carry = two digits`` (the carry, or for
    subtraction the borrow, going out and the column's digit), then the three-digit result boxed.

    Example:
        >>> worked_answer("23 + 48")
        '3+8+0=11 2+4+1=07 \\\\boxed{071}'
        >>> worked_answer("52 - 18")
        '2-8-0=14 5-1-1=03 \\\\boxed{034}'
    """
    left, op, right = expression.split()
    a, b = int(left), int(right)
    if op not in "+-" or not (0 <= a <= 99 and 0 <= b <= 99) or (op == "-" and a < b):
        raise ValueError(f"not an easy-tier expression: {expression!r}")
    a1, a0, b1, b0 = a // 10, a % 10, b // 10, b % 10
    if op == "+":
        units = a0 + b0
        carry = units // 10
        tens = a1 + b1 + carry
        columns = f"{a0}+{b0}+0={units:02d} {a1}+{b1}+{carry}={tens:02d}"
        result = f"{tens:02d}{units % 10}"
    else:
        borrow = int(a0 < b0)
        units = a0 + 10 * borrow - b0
        tens = a1 - b1 - borrow
        columns = f"{a0}-{b0}-0={borrow}{units} {a1}-{b1}-{borrow}=0{tens}"
        result = f"0{tens}{units}"
    return f"{columns} \\boxed{{{result}}}"


def arith_examples(count: int, seed: int = 0) -> list[tuple[str, str]]:
    """``count`` (problem statement, worked answer) pairs of the easy tier from the pre-training stream."""
    from lite_ppo.data.synthetic import SyntheticSource  # lazy: keeps `import lite_ppo.models` light

    source = SyntheticSource("easy", seed=seed, stream=PRETRAIN_STREAM)
    problems = [source.problem(i) for i in range(count)]
    return [(p.problem, worked_answer(p.metadata["expression"])) for p in problems]


def pretrain(model: torch.nn.Module, tokenizer, config: PretrainConfig = DEFAULT_PRETRAIN, on_step=None) -> None:
    """Supervised next-token training of ``model`` on easy-tier examples, in place
    (:func:`~lite_ppo.models.pretraining.supervised_pretrain`).

    ``on_step(step, model)`` (optional) is called after each optimizer step, e.g. to follow
    accuracy while tuning the config.
    """
    supervised_pretrain(
        model,
        tokenizer,
        arith_examples(config.num_problems, config.seed),
        steps=config.steps,
        batch_size=config.batch_size,
        lr=config.lr,
        warmup_steps=config.warmup_steps,
        seed=config.seed,
        on_step=on_step,
    )


def build_tiny_arith_model(path: str | os.PathLike[str], config: PretrainConfig = DEFAULT_PRETRAIN) -> str:
    """Build the tiny Llama, pre-train it on easy arithmetic and save it with its tokenizer.

    Args:
        path: folder to write (created if missing; existing files are overwritten).
        config: the pre-training; the default is what ``builtin:tiny-arith`` uses.

    Returns:
        ``path`` as a string.

    Example:
        >>> build_tiny_arith_model("/tmp/tiny-arith")   # doctest: +SKIP
        '/tmp/tiny-arith'
    """
    from transformers import AutoModelForCausalLM, GenerationConfig

    from lite_ppo.models.tiny import IM_END_ID, IM_START_ID, build_tiny_tokenizer, tiny_config

    path = os.fspath(path)
    tokenizer = build_tiny_tokenizer()
    with deterministic_cpu():
        torch.manual_seed(config.seed)
        model = AutoModelForCausalLM.from_config(
            tiny_config(len(tokenizer), "llama", **ARITH_CONFIG), dtype=torch.float32
        )
        pretrain(model, tokenizer, config)
    model.generation_config = GenerationConfig(bos_token_id=IM_START_ID, eos_token_id=IM_END_ID, pad_token_id=IM_END_ID)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def shipped_digest() -> str:
    """The checksum recorded for the shipped weights (``weights_sha256`` of the manifest)."""
    return pretraining.shipped_digest(SHIPPED_DIR)


def write_shipped_manifest(folder: str | os.PathLike[str]) -> None:
    """Record a built folder's weights checksum and provenance as the shipped manifest (maintainers:
    run after copying a new build into :data:`SHIPPED_DIR`; CONTRIBUTING says when)."""
    pretraining.write_shipped_manifest(folder, asdict(DEFAULT_PRETRAIN))


def install_tiny_arith_model(path: str | os.PathLike[str]) -> str:
    """Copy the shipped ``builtin:tiny-arith`` folder to ``path`` and check its weights' checksum.

    Raises:
        UserError: the shipped files are missing or their weights do not match the recorded
            checksum (a damaged install: reinstall the package).
    """
    return install_shipped(SHIPPED_DIR, path, "builtin:tiny-arith")
