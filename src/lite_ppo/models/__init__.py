"""Models: where the policy's weights and tokenizer come from.

``resolve_model`` turns a config's model name into a local Hugging Face folder: a local
path as is, or a project-built ``builtin:`` model (``builtin:tiny``, ``builtin:tiny-qwen3``,
``builtin:tiny-arith``, ``builtin:testbed-base``, ``builtin:testbed-aligned``,
``builtin:smollm2-135m-instruct``) prepared once into a cache;
``load_causal_lm`` / ``load_tokenizer`` (``loading.py``) build the model and tokenizer from it.

Example:
    >>> from lite_ppo.models import resolve_model
    >>> path = resolve_model("builtin:tiny")     # doctest: +SKIP
"""

from lite_ppo.models.loading import load_causal_lm, load_tokenizer
from lite_ppo.models.registry import BUILTINS, cache_dir, resolve_model
from lite_ppo.models.smollm2 import find_smollm2_gguf, prepare_smollm2
from lite_ppo.models.testbed import build_testbed_model, install_testbed_model
from lite_ppo.models.tiny import build_tiny_model, build_tiny_tokenizer
from lite_ppo.models.tiny_arith import build_tiny_arith_model, install_tiny_arith_model

__all__ = [
    "BUILTINS",
    "build_testbed_model",
    "build_tiny_arith_model",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "cache_dir",
    "find_smollm2_gguf",
    "install_testbed_model",
    "install_tiny_arith_model",
    "load_causal_lm",
    "load_tokenizer",
    "prepare_smollm2",
    "resolve_model",
]
