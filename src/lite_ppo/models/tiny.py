"""A tiny random causal LM with a locally trained tokenizer, for tests and smoke runs.

No model hub is reachable here, so the project builds its own test model: a 2-layer
Llama (or Qwen3) with random weights and a byte-level BPE tokenizer trained by the
`tokenizers` library on a small deterministic corpus of maths questions and chat words.

Example:
    >>> from lite_ppo.models.tiny import build_tiny_model
    >>> path = build_tiny_model("/tmp/tiny")            # doctest: +SKIP
    >>> from transformers import AutoModelForCausalLM, AutoTokenizer
    >>> model = AutoModelForCausalLM.from_pretrained(path)  # doctest: +SKIP
    >>> tok = AutoTokenizer.from_pretrained(path)           # doctest: +SKIP
"""

from __future__ import annotations

import os
import random

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    LlamaConfig,
    PreTrainedConfig,
    PreTrainedTokenizerFast,
    Qwen3Config,
)

__all__ = [
    "ARCHITECTURES",
    "CHATML_TEMPLATE",
    "SPECIAL_TOKENS",
    "TINY_VOCAB_SIZE",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "tiny_config",
]

# Special tokens get the first ids, in this order, and mirror SmolLM2-Instruct's layout
# (0 <|endoftext|>, 1 <|im_start|>, 2 <|im_end|>) so the tiny model exercises the same
# token roles as the real model the main job trains.
SPECIAL_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
ENDOFTEXT_ID, IM_START_ID, IM_END_ID = 0, 1, 2

# Upper bound handed to the BPE trainer; the corpus is small, so the trained vocabulary
# may stop short of it (all 256 byte symbols are always present).
TINY_VOCAB_SIZE = 768

# ChatML, as SmolLM2-Instruct and Qwen use, without a default system prompt: the prompt
# formatting code decides about system messages, not the tokenizer.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

ARCHITECTURES: tuple[str, ...] = ("llama", "qwen3")


def _corpus() -> list[str]:
    """Return the fixed training text for the tokenizer (same list on every call)."""
    # A private Random with a fixed seed: the corpus must not depend on the caller's seed,
    # on global RNG state or on hash randomization, so every build gets the same tokenizer.
    rng = random.Random(20240917)
    words = [
        "What is",
        "Question:",
        "Answer:",
        "The answer is",
        "Let's think step by step.",
        "Please reason step by step, and put your final answer within \\boxed{}.",
        "You are a helpful assistant.",
        "system",
        "user",
        "assistant",
        "plus",
        "minus",
        "times",
        "divided by",
        "equals",
        "sum",
        "difference",
        "product",
        "quotient",
        "total",
        "number",
        "numbers",
        "how many",
        "How many",
        "apples",
        "has",
        "then",
        "gives",
        "away",
        "more",
        "less",
        "each",
        "therefore",
        "so",
        "first",
        "second",
        "result",
        "compute",
        "Compute",
        "Calculate",
        "calculate",
        "Find",
        "find",
        "value",
        "of",
        "the",
        "and",
        "a",
        "is",
        "are",
        "we",
        "get",
        "add",
        "subtract",
        "multiply",
        "divide",
        "Solve",
        "solve",
        "for",
        "x",
        "y",
        "n",
        "If",
        "if",
        "then",
        "final",
        "correct",
        "wrong",
        "Hello",
        "Hi",
        "there",
        "Sure",
        "I",
        "think",
        "it",
    ]
    lines: list[str] = []
    for _ in range(3):
        lines.extend(words)
        lines.append(" ".join(words))
    ops = ["+", "-", "*", "/"]
    for _ in range(400):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        op = rng.choice(ops)
        lines.append(f"What is {a}{op}{b}? The answer is \\boxed{{{a + b if op == '+' else a}}}.")
        lines.append(f"Question: Compute {a} {op} {b}.\nAnswer: \\boxed{{{b}}}")
        lines.append(
            f"<|im_start|>user\nWhat is {a} plus {b}?<|im_end|>\n"
            f"<|im_start|>assistant\n{a} + {b} = {a + b}, so the answer is \\boxed{{{a + b}}}.<|im_end|>\n"
        )
    return lines


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Train the tiny byte-level BPE tokenizer and wrap it for transformers.

    Token roles (chosen to mirror SmolLM2-Instruct): bos ``<|im_start|>`` (never added
    automatically, like SmolLM2), eos ``<|im_end|>`` (ends an assistant turn), pad =
    eos ``<|im_end|>``, unk ``<|endoftext|>``. Pad equals eos on purpose: the real model
    has the same setup, so code tested on the tiny model must already tell padding from
    a genuine end-of-response by the attention mask, not by token id.

    Example:
        >>> tok = build_tiny_tokenizer()
        >>> tok.convert_ids_to_tokens(tok("12")["input_ids"])
        ['1', '2']
    """
    tok = Tokenizer(models.BPE())
    # Digits are split one per token before byte-level BPE, so "127" is always 1,2,7:
    # numbers then share one consistent representation, which makes arithmetic learnable.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        # Start from all 256 byte symbols so any text (any language, any byte) encodes.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
        # Left padding: batched generation needs every prompt to end at the same column.
        padding_side="left",
        # Byte-level decoding is exact; the "clean-up" pass would rewrite " ?" to "?".
        clean_up_tokenization_spaces=False,
        chat_template=CHATML_TEMPLATE,
        model_max_length=2048,
    )


def tiny_config(vocab_size: int, architecture: str = "llama", **overrides) -> PreTrainedConfig:
    """Return the config of the tiny model for a given vocabulary size.

    head_dim is 64 (2 heads x 64 = hidden 128) because vLLM's CPU attention kernel
    rejects small head sizes such as 16. One key/value head (grouped-query attention)
    mirrors SmolLM2 and Qwen3, so weight packing paths are the same as for real models.

    ``overrides`` replace any of the settings below (``builtin:tiny-arith`` uses 4 heads).

    Example:
        >>> tiny_config(512).head_dim
        64
    """
    common = dict(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=IM_START_ID,
        eos_token_id=IM_END_ID,
        pad_token_id=IM_END_ID,
        dtype="float32",
    )
    common.update(overrides)
    if architecture == "llama":
        return LlamaConfig(**common)
    if architecture == "qwen3":
        return Qwen3Config(**common)
    raise ValueError(f"unknown tiny architecture {architecture!r}; known: {', '.join(ARCHITECTURES)}")


def build_tiny_model(path: str | os.PathLike[str], seed: int = 0, architecture: str = "llama") -> str:
    """Build a tiny random causal LM and its tokenizer into the folder ``path``.

    The same ``seed`` gives identical weights; the tokenizer does not depend on the seed
    at all. The folder loads with ``AutoModelForCausalLM``/``AutoTokenizer`` and in vLLM.

    Args:
        path: folder to write (created if missing; existing files are overwritten).
        seed: seed of the weight initialization.
        architecture: ``"llama"`` or ``"qwen3"``.

    Returns:
        ``path`` as a string.

    Example:
        >>> build_tiny_model("/tmp/tiny-llama", seed=0)   # doctest: +SKIP
        '/tmp/tiny-llama'
    """
    path = os.fspath(path)
    tokenizer = build_tiny_tokenizer()
    config = tiny_config(len(tokenizer), architecture)
    # fork_rng: seed the initialization without disturbing the caller's global RNG state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(bos_token_id=IM_START_ID, eos_token_id=IM_END_ID, pad_token_id=IM_END_ID)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
