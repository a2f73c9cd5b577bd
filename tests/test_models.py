"""Tests of lite_ppo.models: the tiny test model, the SmolLM2 conversion and the registry."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from lite_ppo.errors import UserError
from lite_ppo.models import registry
from lite_ppo.models.registry import Builtin, resolve_model
from lite_ppo.models.tiny import build_tiny_model

MATH = "What is 12+7? \\boxed{19}"
CHAT = [{"role": "user", "content": "What is 2+3?"}]


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


# --- tiny model ---------------------------------------------------------------------------


def test_tiny_loads_with_transformers(tiny_path: str) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    tok = AutoTokenizer.from_pretrained(tiny_path)
    assert isinstance(tok, PreTrainedTokenizerFast)
    assert model.config.head_dim == 64
    assert model.config.hidden_size // model.config.num_attention_heads == 64
    assert model.config.vocab_size == len(tok)
    assert 512 <= len(tok) <= 1024
    # Tied embeddings: the output matrix is the input matrix, not a copy.
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    logits = model(**tok(MATH, return_tensors="pt")).logits
    assert logits.shape[-1] == len(tok) and torch.isfinite(logits).all()


def test_tiny_tokenizer_roles_and_padding(tiny_path: str) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_path)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|im_end|>"
    assert tok.bos_token == "<|im_start|>"
    assert tok.padding_side == "left"
    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    assert model.generation_config.eos_token_id == tok.eos_token_id
    assert model.generation_config.pad_token_id == tok.pad_token_id
    batch = tok(["1+1", MATH], padding=True)
    short = batch["input_ids"][0]
    # Left padding: the shorter prompt is padded at the front and ends with its own text.
    assert batch["attention_mask"][0][0] == 0 and batch["attention_mask"][0][-1] == 1
    assert short[0] == tok.pad_token_id and tok.decode(short, skip_special_tokens=True) == "1+1"


def test_tiny_tokenizer_round_trips_and_splits_digits(tiny_path: str) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_path)
    ids = tok(MATH)["input_ids"]
    assert tok.decode(ids) == MATH
    tokens = tok.convert_ids_to_tokens(tok("12345+678")["input_ids"])
    assert tokens == ["1", "2", "3", "4", "5", "+", "6", "7", "8"]
    # No token is added around plain text (like SmolLM2, bos is not prepended).
    assert ids[0] != tok.bos_token_id and ids[-1] != tok.eos_token_id
    # The corpus words are merged into whole tokens, not spelled byte by byte.
    assert len(tok("What is")["input_ids"]) <= 2


def test_tiny_chat_template(tiny_path: str) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_path)
    prompt = tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert prompt == "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n"
    no_prompt = tok.apply_chat_template(CHAT, add_generation_prompt=False, tokenize=False)
    assert no_prompt == "<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
    ids = tok.apply_chat_template(CHAT, add_generation_prompt=True, return_dict=True)["input_ids"]
    # The markers are single special tokens, not spelled out.
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")
    assert ids.count(tok.eos_token_id) == 1
    assert tok.decode(ids) == prompt


def test_tiny_is_deterministic(tmp_path: Path, tiny_path: str) -> None:
    again = build_tiny_model(tmp_path / "again", seed=0)
    other = build_tiny_model(tmp_path / "other", seed=1)
    first = load_file(os.path.join(tiny_path, "model.safetensors"))
    second = load_file(os.path.join(again, "model.safetensors"))
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    third = load_file(os.path.join(other, "model.safetensors"))
    assert not torch.equal(first["model.embed_tokens.weight"], third["model.embed_tokens.weight"])
    # The tokenizer is trained from a fixed corpus: identical files, identical ids.
    assert Path(tiny_path, "tokenizer.json").read_bytes() == Path(again, "tokenizer.json").read_bytes()
    assert Path(tiny_path, "tokenizer.json").read_bytes() == Path(other, "tokenizer.json").read_bytes()
    tok_a, tok_b = AutoTokenizer.from_pretrained(tiny_path), AutoTokenizer.from_pretrained(again)
    assert tok_a(MATH)["input_ids"] == tok_b(MATH)["input_ids"]


def test_tiny_build_leaves_global_rng_alone(tmp_path: Path) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(tmp_path / "m", seed=5)
    assert torch.equal(torch.rand(3), expected)


def test_tiny_qwen3(tmp_path: Path) -> None:
    path = build_tiny_model(tmp_path / "q", seed=0, architecture="qwen3")
    model = AutoModelForCausalLM.from_pretrained(path)
    assert type(model).__name__ == "Qwen3ForCausalLM" and model.config.head_dim == 64
    tok = AutoTokenizer.from_pretrained(path)
    out = model.generate(**tok(MATH, return_tensors="pt"), max_new_tokens=3, do_sample=False)
    assert out.shape[1] == len(tok(MATH)["input_ids"]) + 3
    with pytest.raises(ValueError, match="llama"):
        build_tiny_model(tmp_path / "x", architecture="gpt2")


# --- registry ----------------------------------------------------------------------------


def test_registry_builds_once_and_reuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITE_PPO_CACHE", str(tmp_path / "cache"))
    calls: list[str] = []
    real = registry.BUILTINS["tiny"]

    def counting_build(path: str) -> str:
        calls.append(path)
        return real.build(path)

    monkeypatch.setitem(registry.BUILTINS, "tiny", Builtin(counting_build, real.version, real.description))
    path = resolve_model("builtin:tiny")
    assert Path(path) == tmp_path / "cache" / "models" / "tiny"
    weights = Path(path, "model.safetensors")
    mtime = weights.stat().st_mtime_ns
    assert resolve_model("builtin:tiny") == path
    assert weights.stat().st_mtime_ns == mtime and len(calls) == 1
    # The builtin is the seed-0 tiny model and loads like any folder.
    tok = AutoTokenizer.from_pretrained(path)
    assert tok.decode(tok(MATH)["input_ids"]) == MATH
    # Nothing temporary is left next to the build.
    assert sorted(p.name for p in (tmp_path / "cache" / "models").iterdir() if not p.name.endswith(".lock")) == ["tiny"]


def _fake_builtin(calls: list[str], version: int = 1, fail: bool = False) -> Builtin:
    def build(path: str) -> str:
        calls.append(path)
        time.sleep(0.3)  # long enough for a concurrent caller to arrive while building
        if fail:
            raise RuntimeError("build failed")
        Path(path, "config.json").write_text("{}")
        return path

    return Builtin(build, version, "fake")


def test_registry_concurrent_callers_build_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITE_PPO_CACHE", str(tmp_path))
    calls: list[str] = []
    monkeypatch.setitem(registry.BUILTINS, "fake", _fake_builtin(calls))
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(resolve_model("builtin:fake"))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert results == [str(tmp_path / "models" / "fake")] * 3
    assert Path(results[0], "config.json").is_file()


def test_registry_rebuilds_stale_version_and_cleans_failed_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LITE_PPO_CACHE", str(tmp_path))
    calls: list[str] = []
    monkeypatch.setitem(registry.BUILTINS, "fake", _fake_builtin(calls, version=1))
    path = Path(resolve_model("builtin:fake"))
    monkeypatch.setitem(registry.BUILTINS, "fake", _fake_builtin(calls, version=2))
    assert Path(resolve_model("builtin:fake")) == path and len(calls) == 2
    assert json.loads((path / "lite_ppo_build.json").read_text())["version"] == 2

    monkeypatch.setitem(registry.BUILTINS, "broken", _fake_builtin(calls, fail=True))
    with pytest.raises(RuntimeError, match="build failed"):
        resolve_model("builtin:broken")
    leftovers = [p.name for p in (tmp_path / "models").iterdir() if not p.name.endswith(".lock")]
    assert leftovers == ["fake"]


def test_registry_rejects_unknown_builtin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITE_PPO_CACHE", str(tmp_path))
    with pytest.raises(ValueError, match="builtin:nope") as err:
        resolve_model("builtin:nope")
    assert "builtin:tiny" in str(err.value) and "builtin:smollm2-135m-instruct" in str(err.value)
    assert not (tmp_path / "models").exists()


def test_registry_local_paths(tmp_path: Path, tiny_path: str) -> None:
    assert resolve_model(tiny_path) == tiny_path
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(UserError, match="no-such-model"):
        resolve_model(missing)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="config.json"):
        resolve_model(str(tmp_path / "empty"))


# --- engines -----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.vllm
def test_tiny_loads_in_vllm_with_hf_logprobs(tiny_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams

    tok = AutoTokenizer.from_pretrained(tiny_path)
    ids = tok(MATH)["input_ids"]
    llm = LLM(model=tiny_path, enforce_eager=True, dtype="float32", max_model_len=256, seed=0)
    out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=0))
    engine = torch.tensor([out[0].prompt_logprobs[i][t].logprob for i, t in enumerate(ids) if i > 0])
    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1], dim=-1)
    hf = logp.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    # Same weights in both engines (tied head included): per-token log-probs agree.
    assert torch.allclose(engine, hf, atol=1e-3)


# --- SmolLM2 -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_path(_model_cache) -> str:
    """The builtin, converted by ``prepare_smollm2`` once per test session into the session's model
    cache (other test modules use the same folder, so the conversion runs once)."""
    pytest.importorskip("gguf")
    from lite_ppo.models import resolve_model
    from lite_ppo.models.smollm2 import find_smollm2_gguf

    try:
        find_smollm2_gguf()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    return resolve_model("builtin:smollm2-135m-instruct")


@pytest.mark.slow
def test_smollm2_tokenizer(smollm2_path: str) -> None:
    tok = AutoTokenizer.from_pretrained(smollm2_path)
    assert isinstance(tok, PreTrainedTokenizerFast)
    assert len(tok) == 49152
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2
    assert tok.pad_token == "<|im_end|>" and tok.bos_token == "<|im_start|>"
    assert tok.padding_side == "left"
    assert tok.decode(tok(MATH)["input_ids"]) == MATH
    assert tok.convert_ids_to_tokens(tok("127")["input_ids"]) == ["1", "2", "7"]
    prompt = tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert prompt.startswith("<|im_start|>system\n")
    assert prompt.endswith("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.slow
def test_smollm2_generates_sensible_answer(smollm2_path: str) -> None:
    model = AutoModelForCausalLM.from_pretrained(smollm2_path)
    tok = AutoTokenizer.from_pretrained(smollm2_path)
    assert model.config.tie_word_embeddings and model.config.num_hidden_layers == 30
    assert model.generation_config.eos_token_id == tok.eos_token_id
    enc = tok.apply_chat_template(CHAT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**enc, max_new_tokens=40, do_sample=False)
    answer = out[0, enc["input_ids"].shape[1] :]
    text = tok.decode(answer, skip_special_tokens=True)
    # A correctly dequantized model answers this one right and ends its turn with eos;
    # a broken conversion (e.g. un-permuted Q/K) produces gibberish that runs to the limit.
    assert "5" in text
    assert answer[-1].item() == tok.eos_token_id


def _damage(weights: Path, how: str) -> None:
    """Damage a cached safetensors file the ways a disk, a tool or a person does."""
    import os

    from safetensors.torch import load_file, save_file

    if how == "flip":  # one bit of the last tensor's bytes
        data = bytearray(weights.read_bytes())
        data[-5] ^= 0x10
        weights.write_bytes(bytes(data))
    elif how == "swap":  # two rows of the embedding swapped: same size, a valid file
        state = load_file(str(weights))
        name = next(k for k in sorted(state) if "embed" in k)
        state[name][[0, 1]] = state[name][[1, 0]]
        save_file(state, str(weights), metadata={"format": "pt"})
    elif how == "truncate":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif how == "delete":
        weights.unlink()
    elif how == "garbage, same size and time":  # only a full hash can see this one
        stat = weights.stat()
        weights.write_bytes(torch.randint(0, 256, (stat.st_size,), dtype=torch.uint8).numpy().tobytes())
        os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.mark.parametrize("how", ["flip", "swap", "truncate", "delete", "garbage, same size and time"])
def test_a_damaged_model_cache_is_found_and_repaired(tmp_path, monkeypatch, capsys, how):
    from lite_ppo.cli.prepare_model import main as prepare_main
    from lite_ppo.models.pretraining import weights_digest
    from lite_ppo.models.testbed import shipped_digest

    monkeypatch.setenv("LITE_PPO_CACHE", str(tmp_path))
    path = Path(resolve_model("builtin:testbed-base"))
    assert weights_digest(path) == shipped_digest("base")
    assert registry.cache_problem(path, registry.BUILTINS["testbed-base"].version, full=True) is None
    _damage(path / "model.safetensors", how)
    capsys.readouterr()
    if how.startswith("garbage"):
        # Size and time as recorded: a run's quick check passes it; prepare-model hashes and repairs.
        assert resolve_model("builtin:testbed-base") == str(path) and "again" not in capsys.readouterr().err
        assert prepare_main(["builtin:testbed-base"]) == 0
        out, err = capsys.readouterr()
        assert out == f"{path}\n"
        err = err.strip().splitlines()
        assert len(err) == 2 and "model.safetensors changed" in err[1] and "built again" in err[1], err
        err = err[:1]  # the repair as it began, checked below like the quick check's
    else:
        assert resolve_model("builtin:testbed-base") == str(path)
        err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "builtin:testbed-base" in err[0] and err[0].endswith("building it again"), err
    assert ("missing" if how == "delete" else "model.safetensors changed") in err[0]
    assert weights_digest(path) == shipped_digest("base")  # the shipped weights again
    assert registry.cache_problem(path, registry.BUILTINS["testbed-base"].version, full=True) is None
