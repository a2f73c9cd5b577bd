"""The one model loader (lite_ppo.models.loading) and the checkpoint reader, on the tiny builtin.

Expectations come from transformers itself (``from_pretrained`` of the resolved folder) and from the
tensors written into a checkpoint by hand.
"""

from __future__ import annotations

import gc
import shutil
import weakref
from contextlib import contextmanager

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lite_ppo.errors import UserError
from lite_ppo.models import load_causal_lm, load_tokenizer, resolve_model
from lite_ppo.models.loading import load_weights

EMBED, HEAD = "model.embed_tokens.weight", "lm_head.weight"


def _perturbed_state(path: str) -> dict[str, torch.Tensor]:
    """The tiny model's float32 weights plus a seeded perturbation: a checkpoint unlike the folder.
    Both tied names hold the same values, as a tied model's checkpoint does."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    state = {
        k: (v + 0.01 * torch.randn(v.shape, generator=gen)).detach().clone() for k, v in model.state_dict().items()
    }
    state[HEAD] = state[EMBED].clone()
    return state


def test_builtin_name_loads_the_resolved_folder_with_its_weights(tiny_model_path):
    model = load_causal_lm("builtin:tiny")
    reference = AutoModelForCausalLM.from_pretrained(resolve_model("builtin:tiny"), dtype=torch.float32)
    assert model.state_dict().keys() == reference.state_dict().keys()
    for name, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    assert load_tokenizer("builtin:tiny").get_vocab() == AutoTokenizer.from_pretrained(tiny_model_path).get_vocab()


def test_tied_lm_head_shares_storage_after_loading(tiny_model_path):
    model = load_causal_lm(tiny_model_path)
    assert model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


@pytest.mark.parametrize("names", ["both", "embedding only", "lm_head only"])
def test_checkpoint_weights_fill_a_tied_model_whatever_names_it_holds(tiny_model_path, names):
    state = _perturbed_state(tiny_model_path)
    if names == "embedding only":
        del state[HEAD]
    elif names == "lm_head only":
        del state[EMBED]
    model = load_causal_lm(tiny_model_path, "float32", weights=state)
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    loaded = model.state_dict()
    for name, value in state.items():
        assert torch.equal(loaded[name], value), name
    assert torch.equal(loaded[EMBED], loaded[HEAD])


def test_dtype_is_honoured(tiny_model_path):
    from_folder = load_causal_lm(tiny_model_path, "bfloat16")
    state = _perturbed_state(tiny_model_path)
    from_weights = load_causal_lm(tiny_model_path, torch.bfloat16, weights=state)
    assert (
        {p.dtype for p in from_folder.parameters()} == {p.dtype for p in from_weights.parameters()} == {torch.bfloat16}
    )
    for name, value in state.items():  # the float32 checkpoint rounded once to bfloat16
        assert torch.equal(from_weights.state_dict()[name], value.to(torch.bfloat16)), name
    with pytest.raises(UserError, match="'float64'"):
        load_causal_lm(tiny_model_path, "float64")


def test_pad_token_is_eos_when_the_tokenizer_has_none(tiny_model_path, tmp_path):
    folder = tmp_path / "no_pad"
    folder.mkdir()
    shutil.copy(f"{tiny_model_path}/config.json", folder / "config.json")  # a model folder, as resolve_model wants
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    tokenizer.pad_token = None
    tokenizer.save_pretrained(folder)
    assert AutoTokenizer.from_pretrained(folder).pad_token_id is None  # the case under test
    loaded = load_tokenizer(str(folder))
    assert loaded.pad_token == loaded.eos_token and loaded.pad_token_id == loaded.eos_token_id is not None
    # A tokenizer with its own pad token keeps it.
    assert load_tokenizer(tiny_model_path).pad_token_id == AutoTokenizer.from_pretrained(tiny_model_path).pad_token_id


class _Lazy:
    """Stands for DeepSpeed's lazy consolidated tensor: the data exists once ``contiguous()`` is called."""

    materialised = 0

    def __init__(self, tensor: torch.Tensor) -> None:
        self._tensor = tensor

    def contiguous(self) -> torch.Tensor:
        _Lazy.materialised += 1
        return self._tensor.clone()


def test_lazy_weights_are_materialised_once_each(tiny_model_path):
    state = _perturbed_state(tiny_model_path)
    model = load_causal_lm(tiny_model_path)
    _Lazy.materialised = 0
    load_weights(model, {k: _Lazy(v) for k, v in state.items()})
    assert _Lazy.materialised == len(state)
    for name, value in state.items():
        assert torch.equal(model.state_dict()[name], value), name


@pytest.mark.parametrize("mistake", ["tied tensor under no name", "a layer missing", "an extra name", "a wrong shape"])
def test_weights_of_another_model_are_refused_in_one_line(tiny_model_path, mistake):
    state = _perturbed_state(tiny_model_path)
    if mistake == "tied tensor under no name":
        del state[EMBED], state[HEAD]
    elif mistake == "a layer missing":
        del state["model.layers.1.mlp.up_proj.weight"]
    elif mistake == "an extra name":
        state["model.layers.9.mlp.up_proj.weight"] = state["model.layers.1.mlp.up_proj.weight"]
    else:
        state["model.norm.weight"] = torch.ones(3)
    model = load_causal_lm(tiny_model_path)
    with pytest.raises(UserError) as error:
        load_weights(model, state, source="checkpoint x.ckpt", model_name="builtin:tiny")
    message = str(error.value)
    assert "checkpoint x.ckpt" in message and "builtin:tiny" in message and "\n" not in message


def _checkpoint_with_one_tied_name(tiny_model_path, tmp_path, **extra):
    """A Lightning checkpoint of perturbed weights whose state dict keeps the tied tensor under the
    embedding's name only: ``(state, path)``."""
    state = _perturbed_state(tiny_model_path)
    del state[HEAD]
    ckpt = tmp_path / "step.ckpt"
    checkpoint = {"hyper_parameters": {"model_path": tiny_model_path}}
    torch.save({**checkpoint, "state_dict": {f"policy.{k}": v for k, v in state.items()}, **extra}, ckpt)
    return state, ckpt


def test_evaluate_reads_a_checkpoint_saved_with_one_tied_name(tiny_model_path, tmp_path):
    """A Lightning checkpoint whose state dict keeps the tied tensor under the embedding's name only."""
    from lite_ppo.evaluation.runner import load_policy_module

    state, ckpt = _checkpoint_with_one_tied_name(tiny_model_path, tmp_path, policy_version=3)
    module = load_policy_module(str(ckpt))
    assert module.policy_version == 3
    assert torch.equal(module.policy.lm_head.weight, state[EMBED])
    assert module.policy.lm_head.weight.data_ptr() == module.policy.get_input_embeddings().weight.data_ptr()


def test_export_writes_a_checkpoint_saved_with_one_tied_name(tiny_model_path, tmp_path):
    """``lite-ppo export-hf`` of a checkpoint keeping the tied tensor under the embedding's name only
    (the export used to refuse it: ``from_config`` leaves a model untied in transformers 5)."""
    from lite_ppo.checkpoints.export import export_hf

    state, ckpt = _checkpoint_with_one_tied_name(tiny_model_path, tmp_path)
    out = export_hf(ckpt, tmp_path / "hf")
    exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    for name, value in state.items():
        assert torch.equal(exported.state_dict()[name], value), name
    assert torch.equal(exported.lm_head.weight, state[EMBED])


def test_the_module_keeps_the_zero3_token_not_the_policy(tiny_model_path, monkeypatch):
    """transformers' ZeRO-3 flag is a weak reference to a token: it lasts as long as the module that
    holds the partitioned policy, and no attribute of ours is set on the Hugging Face model."""
    import lite_ppo.training.module as module_file
    from lite_ppo.training.module import LitePPO

    class Token:  # stands for strategies.zero._HFZero3Config, registered without a DeepSpeed run
        pass

    refs = []

    @contextmanager
    def fake_loading(trainer):
        token = Token()
        refs.append(weakref.ref(token))
        yield token

    monkeypatch.setattr(module_file, "hf_zero3_loading", fake_loading)
    module = LitePPO(model_path=tiny_model_path)
    module.configure_model()
    gc.collect()
    assert refs[0]() is not None  # alive with the module
    assert not [k for k in vars(module.policy) if k.startswith("_lite_ppo")]
    del module
    gc.collect()
    assert refs[0]() is None  # released with it


def test_an_export_stopped_part_way_leaves_the_earlier_export_whole(tiny_model_path, tmp_path, monkeypatch):
    """export-hf into an earlier export's folder writes beside it and replaces it once complete: a
    failure while writing (a kill, a full disk) leaves the earlier export as it was and no partial
    folder; a folder holding anything else is refused in one line."""
    import transformers

    from lite_ppo.checkpoints.export import export_hf
    from lite_ppo.errors import UserError

    _, ckpt = _checkpoint_with_one_tied_name(tiny_model_path, tmp_path)
    out = export_hf(ckpt, tmp_path / "hf")
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full_disk(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(transformers.PreTrainedTokenizerBase, "save_pretrained", full_disk)
    with pytest.raises(OSError, match="No space left"):
        export_hf(ckpt, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "step.ckpt"]  # no staging folder left
    monkeypatch.undo()
    assert export_hf(ckpt, out) == out and (out / "lite_ppo_export.json").is_file()  # replaced whole
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("mine")
    with pytest.raises(UserError, match="not an earlier export"):
        export_hf(ckpt, other)
    assert (other / "todo.txt").read_text() == "mine"
