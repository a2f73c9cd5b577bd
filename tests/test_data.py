"""Tests of lite_ppo.data: synthetic tiers, file loading, the DataModule's batches and resume, prompts."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data.distributed import DistributedSampler

from lite_ppo.data import (
    DataFormatError,
    MathDataModule,
    Problem,
    PromptFormatter,
    SyntheticSource,
    load_jsonl_problems,
    load_parquet_problems,
)
from lite_ppo.errors import UserError

TIERS = ("easy", "medium", "hard")


def shared_data_dir() -> Path:
    """shared/data next to the repository, or $LITE_PPO_SHARED_DATA."""
    env = os.environ.get("LITE_PPO_SHARED_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"


def numbers_in(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", text)]


def fake_trainer(rank: int = 0, world_size: int = 1) -> SimpleNamespace:
    # What the data module reads from a Trainer: rank, world size, and whether it is training.
    return SimpleNamespace(global_rank=rank, world_size=world_size, training=True)


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


# ---------------------------------------------------------------- synthetic tiers
@settings(max_examples=300, deadline=None)
@given(tier=st.sampled_from(TIERS), seed=st.integers(0, 10**6), index=st.integers(0, 10**9))
def test_synthetic_answers_are_right(tier: str, seed: int, index: int) -> None:
    p = SyntheticSource(tier, seed).problem(index)
    assert p.id == f"synthetic-{tier}-{index}" and p.tier == tier
    assert re.fullmatch(r"\d+", p.answer), p.answer  # exact non-negative integer
    match = re.fullmatch(r"What is ([\d +\-×()]+)\?", p.problem)
    if match:  # arithmetic: evaluate the expression exactly as the text writes it
        assert eval(match.group(1).replace("×", "*")) == int(p.answer)
    else:  # word problem: the recorded expression uses exactly the text's numbers, in order
        assert p.metadata["kind"] == "word"
        assert numbers_in(p.metadata["expression"]) == numbers_in(p.problem)
        assert eval(p.metadata["expression"]) == int(p.answer)


def test_synthetic_word_problem_semantics() -> None:
    # One template checked by hand against its story, independent of the recorded expression.
    for i in range(200):
        p = SyntheticSource("hard", 3).problem(i)
        if p.problem.startswith("A warehouse holds"):
            a, b, c, d = numbers_in(p.problem)
            assert int(p.answer) == a - b * c + d
            return
    pytest.fail("no warehouse problem in 200 draws")


def test_synthetic_tiers_differ_in_difficulty() -> None:
    stats = {}
    for tier in TIERS:
        source = SyntheticSource(tier, seed=7)
        ops, biggest = [], []
        for i in range(400):
            p = source.problem(i)
            numbers = numbers_in(p.problem)  # every number in a statement is an operand
            ops.append(len(numbers) - 1)
            biggest.append(max(numbers))
            if p.problem.startswith("What is"):  # arithmetic: the operator symbols agree
                assert len(re.findall(r"[+\-×]", p.problem)) == len(numbers) - 1
            assert p.metadata["num_operations"] == len(numbers) - 1
            assert p.metadata["max_operand"] == max(numbers)
        stats[tier] = (ops, biggest)
    assert set(stats["easy"][0]) == {1} and max(stats["easy"][1]) <= 99
    assert set(stats["medium"][0]) == {2} and 100 <= max(stats["medium"][1]) <= 999
    assert set(stats["hard"][0]) == {3} and max(stats["hard"][1]) <= 9999
    means = [sum(stats[t][1]) / 400 for t in TIERS]
    assert means[0] < 100 < means[1] < 1000 < means[2], means
    hard_texts = [SyntheticSource("hard", 7).problem(i).problem for i in range(50)]
    assert any("(" in t for t in hard_texts) and any(not t.startswith("What is") for t in hard_texts)


def test_synthetic_is_deterministic_per_seed() -> None:
    a = [SyntheticSource("medium", 1).problem(i) for i in range(20)]
    assert a == [SyntheticSource("medium", 1).problem(i) for i in range(20)]
    assert a != [SyntheticSource("medium", 2).problem(i) for i in range(20)]
    with pytest.raises(ValueError, match="unknown synthetic tier"):
        SyntheticSource("impossible")


# ---------------------------------------------------------------- files
def test_malformed_lines_name_file_line_and_field(tmp_path: Path) -> None:
    good = {"id": "a", "problem": "1 + 1?", "answer": "2"}
    cases = [
        (["{not json"], 1, "invalid JSON (Expecting property name enclosed in double quotes at column 2)"),
        ([good, "", {"id": "b", "problem": "x"}], 3, "field 'answer' is missing"),  # blank line 2 still counts
        ([good, {"id": "b", "problem": "  ", "answer": "1"}], 2, "field 'problem' is empty"),
        ([{"id": "b", "problem": "x", "answer": 3}], 1, "field 'answer' must be a string, got int"),
        ([{**good, "level": "5"}], 1, "field 'level' must be an integer"),
        ([{**good, "difficulty": 2}], 1, "field 'difficulty' must be a string"),
        ([good, good], 2, "field 'id' repeats 'a'"),
        (["[1, 2]"], 1, "expected a JSON object"),
    ]
    for number, (records, line, message) in enumerate(cases):
        path = write_jsonl(tmp_path / f"bad{number}.jsonl", records)
        with pytest.raises(DataFormatError) as info:
            load_jsonl_problems(path)
        assert str(info.value).startswith(f"{path}:{line}: "), str(info.value)
        assert message in str(info.value)
        assert isinstance(info.value, ValueError)
    # A last line without its newline: json's message ends in "at", the column completes it (not "at at").
    (tmp_path / "cut.jsonl").write_text('{"id": "a')
    with pytest.raises(DataFormatError, match=r"invalid JSON \(Unterminated string starting at column 8\)$"):
        load_jsonl_problems(tmp_path / "cut.jsonl")


def test_jsonl_fields_and_tier(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "mine.jsonl",
        [
            {"id": "1", "problem": "p", "answer": "4", "level": 2, "difficulty": "medium", "source": "S", "extra": [1]},
            "  ",
            {"id": "2", "problem": "q", "answer": "5"},
        ],
    )
    first, second = load_jsonl_problems(path)
    assert (first.tier, first.level, first.source) == ("medium", 2, "S")
    assert (second.tier, second.level, second.source) == ("mine", None, "")  # no difficulty: the file stem
    assert {p.tier for p in load_jsonl_problems(path, tier="hard")} == {"hard"}


def test_parquet(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow", reason="pyarrow is optional and not installed")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"id": "1", "problem": "p", "answer": "4"}]), tmp_path / "t.parquet")
    assert load_parquet_problems(tmp_path / "t.parquet", tier="easy")[0].answer == "4"


@pytest.mark.skipif(not shared_data_dir().is_dir(), reason=f"shared data not found at {shared_data_dir()}")
def test_loads_shared_data() -> None:
    easy = load_jsonl_problems(shared_data_dir() / "train" / "easy.jsonl")
    assert len(easy) == 8032 and {p.tier for p in easy} == {"easy"}
    assert {p.level for p in easy} == {0, 1}
    math500 = load_jsonl_problems(shared_data_dir() / "eval" / "math500.jsonl")
    assert len(math500) == 500 and math500[0].id.startswith("math500/")
    assert all(p.answer and 1 <= p.level <= 5 for p in math500)


# ---------------------------------------------------------------- batches
def test_same_seed_same_batches_different_seed_different() -> None:
    weights = {"easy": 1, "medium": 1, "hard": 1}
    a, b, c = (MathDataModule(weights=weights, prompts_per_step=16, seed=s) for s in (1, 1, 2))
    assert [a.global_batch(k) for k in range(5)] == [b.global_batch(k) for k in range(5)]
    assert a.global_batch(0) != c.global_batch(0)
    assert a.global_batch(0) != a.global_batch(1)
    # Batch k does not depend on which batches were asked for before it.
    assert MathDataModule(weights=weights, prompts_per_step=16, seed=1).global_batch(4) == a.global_batch(4)


def test_mixture_weights_are_respected() -> None:
    dm = MathDataModule(weights={"easy": 0.25, "hard": 0.75}, prompts_per_step=100, seed=3)
    tiers = [p.tier for k in range(40) for p in dm.global_batch(k)]
    share = tiers.count("easy") / len(tiers)
    # Binomial(4000, 0.25): std = sqrt(0.25 * 0.75 / 4000) = 0.0068; 0.03 is 4.4 std.
    assert abs(share - 0.25) < 0.03, share
    assert "medium" not in tiers  # zero weight: never drawn


def test_curriculum_switches_at_its_step() -> None:
    schedule = [{"step": 8, "weights": {"medium": 1.0}}, {"step": 5, "weights": {"hard": 1.0}}]  # any order
    dm = MathDataModule(weights={"easy": 1.0}, schedule=schedule, prompts_per_step=8)
    expected = ["easy"] * 5 + ["hard"] * 3 + ["medium"] * 2
    assert [{p.tier for p in dm.global_batch(k)} for k in range(10)] == [{t} for t in expected]
    assert dm.weights_at(4) == {"easy": 1.0, "medium": 0.0, "hard": 0.0}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"weights": {"expert": 1.0}}, "unknown tier 'expert'; the tiers defined in sources are: easy, medium, hard"),
        ({"weights": {"easy": -0.5, "hard": 1.0}}, "weights: weight of tier 'easy' is negative"),
        ({"weights": {"easy": 0.0}}, "weights: all tier weights are zero"),
        ({"schedule": [{"step": 3, "weights": {"easy": 0}}]}, r"schedule\[0\].weights: all tier weights are zero"),
        (
            {"schedule": [{"step": 1, "weights": {"easy": 1}}, {"step": 1, "weights": {"hard": 1}}]},
            "two entries have step 1",
        ),
        ({"schedule": [{"at": 1, "weights": {"easy": 1}}]}, r"schedule\[0\]: expected"),
        ({"sources": {"easy": "synthetic:expert"}}, "unknown synthetic tier 'expert'"),
        ({"prompts_per_step": 0}, "prompts_per_step must be >= 1"),
    ],
)
def test_configuration_errors_are_clear(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MathDataModule(**kwargs).setup()


def test_missing_file_source() -> None:
    with pytest.raises(UserError, match=r"sources\['easy'\]: no such file"):
        MathDataModule(sources={"easy": "/nonexistent/easy.jsonl"}).setup()


def test_rank_slices_union_to_the_global_batch() -> None:
    kwargs = dict(weights={"easy": 1, "hard": 1}, prompts_per_step=12, steps_per_epoch=3, seed=5)
    single = MathDataModule(**kwargs)
    single.trainer = fake_trainer()
    whole = list(single.train_dataloader())
    shares = []
    for rank in range(2):
        dm = MathDataModule(**kwargs)
        dm.trainer = fake_trainer(rank, 2)
        shares.append(list(dm.train_dataloader()))
    for k, batch in enumerate(whole):
        r0, r1 = shares[0][k], shares[1][k]
        assert batch["index"] == r0["index"] == r1["index"] == k
        assert r0["problems"] + r1["problems"] == batch["problems"]
        assert len(r0["problems"]) == len(r1["problems"]) == 6 and (r0["offset"], r1["offset"]) == (0, 6)
        assert not {p.id for p in r0["problems"]} & {p.id for p in r1["problems"]}
    odd = MathDataModule(prompts_per_step=10)
    odd.trainer = fake_trainer(0, 4)
    with pytest.raises(ValueError, match="prompts_per_step=10 is not divisible by the world size 4"):
        odd.train_dataloader()


@settings(max_examples=30, deadline=None)
@given(world_size=st.sampled_from([1, 2, 4, 8]), k=st.integers(0, 10**6), seed=st.integers(0, 100))
def test_rank_batches_concatenate_to_the_global_batch(world_size: int, k: int, seed: int) -> None:
    dm = MathDataModule(weights={"easy": 1, "medium": 2, "hard": 1}, prompts_per_step=16, seed=seed)
    shares = [dm.rank_batch(k, rank, world_size) for rank in range(world_size)]
    assert [p for share in shares for p in share["problems"]] == dm.global_batch(k)
    assert [share["offset"] for share in shares] == [16 // world_size * r for r in range(world_size)]


def test_train_loader_items_and_sampler() -> None:
    dm = MathDataModule(prompts_per_step=4, steps_per_epoch=3)
    loader = dm.train_dataloader()
    # A DistributedSampler subclass: Lightning must not wrap it (ranks slice inside each batch).
    assert isinstance(loader.sampler, DistributedSampler) and len(loader) == 3
    items = list(loader)
    assert [item["index"] for item in items] == [0, 1, 2]
    assert all(isinstance(p, Problem) for p in items[0]["problems"])  # not collated into something else
    assert items[1]["problems"] == dm.global_batch(1)


def test_state_dict_resume_continues_with_the_next_batch() -> None:
    dm = MathDataModule(prompts_per_step=4, steps_per_epoch=5, seed=9)
    for batch in list(dm.train_dataloader())[:3]:
        dm.on_after_batch_transfer(batch, 0)  # what Lightning calls before each training step
    state = dm.state_dict()
    assert state["consumed_batches"] == 3
    resumed = MathDataModule(prompts_per_step=4, steps_per_epoch=5, seed=9)
    resumed.load_state_dict(state)
    loader = resumed.train_dataloader()
    rest = list(loader)
    assert [b["index"] for b in rest] == [3, 4] and len(loader) == 5  # rest of the epoch; len = full epoch
    assert rest[0]["problems"] == dm.global_batch(3)
    for batch in rest:
        resumed.on_after_batch_transfer(batch, 0)
    assert [b["index"] for b in loader] == [5, 6, 7, 8, 9]  # the next epoch, same loader
    # Validation batches do not advance the stream.
    resumed.trainer = SimpleNamespace(global_rank=0, world_size=1, training=False)
    resumed.on_after_batch_transfer({"problems": [], "index": 0}, 0)
    assert resumed.consumed_batches == 5


def test_synthetic_held_out_is_disjoint_from_training() -> None:
    only_easy = {"easy": "synthetic:easy"}
    dm = MathDataModule(sources=only_easy, prompts_per_step=64, val_size=300, seed=11)
    held = dm.held_out()
    assert len(held) == 300 and len({p.problem for p in held}) == 300 and {p.tier for p in held} == {"easy"}
    held_texts = {p.problem for p in held}
    train_texts = {p.problem for k in range(150) for p in dm.global_batch(k)}  # 9600 draws of ~14.7k problems
    assert not train_texts & held_texts
    # The exclusion is what makes this hold: the raw training stream does meet held-out texts.
    raw = {SyntheticSource("easy", 11).problem(i).problem for i in range(9600)}
    assert raw & held_texts
    assert MathDataModule(sources=only_easy, val_size=300, seed=11).held_out() == held  # drawn once, deterministically


def test_file_held_out_is_disjoint_and_served_by_val_loader(tmp_path: Path) -> None:
    rows = [{"id": f"r{i}", "problem": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(40)]
    rows.append({"id": "dup", "problem": rows[0]["problem"], "answer": "1"})  # same text as r0
    path = write_jsonl(tmp_path / "tier.jsonl", rows)
    dm = MathDataModule(sources={"easy": str(path)}, prompts_per_step=8, val_size=10, val_batch_size=4, seed=2)
    held_texts = {p.problem for p in dm.held_out()}
    assert len(dm.held_out()) == 10
    train = [p for k in range(30) for p in dm.global_batch(k)]  # 240 draws: every row seen several times
    assert not {p.problem for p in train} & held_texts
    assert {p.problem for p in train} | held_texts == {r["problem"] for r in rows}
    batches = list(dm.val_dataloader())
    assert [b["index"] for b in batches] == [0, 1, 2] and [len(b["problems"]) for b in batches] == [4, 4, 2]
    assert [p for b in batches for p in b["problems"]] == dm.held_out()
    assert MathDataModule(prompts_per_step=8).val_dataloader() == []


def test_heldout_seed_fixes_the_file_split_across_data_seeds(tmp_path: Path) -> None:
    """``heldout_seed`` chooses a file's held-out rows whatever the data seed; the training order still
    follows the data seed and never yields a held-out row."""
    rows = [{"id": f"r{i}", "problem": f"What is {i} + 2?", "answer": str(i + 2)} for i in range(60)]
    path = str(write_jsonl(tmp_path / "tier.jsonl", rows))
    fixed = [
        MathDataModule(sources={"easy": path}, prompts_per_step=8, val_size=6, seed=s, heldout_seed=4) for s in (0, 1)
    ]
    assert [p.id for p in fixed[0].held_out()] == [p.id for p in fixed[1].held_out()]
    assert [p.id for p in fixed[0].global_batch(0)] != [p.id for p in fixed[1].global_batch(0)]
    for dm in fixed:
        assert not {p.id for p in dm.held_out()} & {p.id for k in range(20) for p in dm.global_batch(k)}
    follows = [MathDataModule(sources={"easy": path}, val_size=6, seed=s).held_out() for s in (0, 1)]
    assert [p.id for p in follows[0]] != [p.id for p in follows[1]]


@pytest.mark.parametrize("world", [1, 2, 3])
def test_val_loader_serves_held_out_tiers_then_configured_sets_across_ranks(world: int) -> None:
    """``configure_validation``: the data module's own loader serves the held-out batches, then the
    named sets in global batches sliced across ranks; every rank runs the same number of batches,
    and together they cover every problem once (padding copies flagged invalid)."""
    sets = [("s1", [Problem(f"a{i}", "q", "1", "s1") for i in range(5)]), ("s2", [Problem("b0", "q", "1", "s2")])]
    per_rank = []
    for rank in range(world):
        dm = MathDataModule(prompts_per_step=6, val_size=2, val_batch_size=4, seed=3)
        dm.trainer = SimpleNamespace(global_rank=rank, world_size=world)
        dm.configure_validation(sets, batch_size=3)
        per_rank.append(list(dm.val_dataloader()))
    assert len({len(items) for items in per_rank}) == 1  # ranks stay in step
    # 3 tiers x 2 held out = 6 problems in batches of 4, then s1 in batches of 3 (3 + 2) and s2 (1).
    assert [item.get("benchmark") for item in per_rank[0]] == [None, None, "s1", "s1", "s2"]
    held = [p for items in per_rank for item in items if "benchmark" not in item for p in item["problems"]]
    assert sorted(p.id for p in held) == sorted(p.id for p in dm.held_out())
    set_items = [item for items in per_rank for item in items if "benchmark" in item]
    counted = [p.id for item in set_items for p, ok in zip(item["problems"], item["valid"]) if ok]
    assert sorted(counted) == sorted(p.id for _, problems in sets for p in problems)
    dm.configure_validation(sets, batch_size=3, held_out=False)
    assert [item["benchmark"] for item in dm.val_dataloader()] == ["s1", "s1", "s2"]


# ---------------------------------------------------------------- Lightning resume, end to end
def _make_module(seen: list[int]):
    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def training_step(self, batch, batch_idx):
            seen.append(batch["index"])
            assert all(isinstance(p, Problem) for p in batch["problems"])
            return (self.weight - 1.0).pow(2).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Module()


def _trainer(max_steps: int, sanity_steps: int = 0):
    import lightning.pytorch as pl

    return pl.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=sanity_steps,
    )


class SpyDataModule(MathDataModule):
    """Records the order in which Lightning calls the restore and loader hooks."""

    calls: list[str] = []

    def load_state_dict(self, state_dict):
        self.calls.append("load_state_dict")
        super().load_state_dict(state_dict)

    def train_dataloader(self):
        self.calls.append("train_dataloader")
        return super().train_dataloader()


def test_lightning_checkpoint_resume_continues_with_next_batch(tmp_path: Path) -> None:
    kwargs = dict(prompts_per_step=2, steps_per_epoch=5, seed=4)
    seen: list[int] = []
    trainer = _trainer(3)
    trainer.fit(_make_module(seen), datamodule=SpyDataModule(**kwargs))
    trainer.save_checkpoint(tmp_path / "mid.ckpt")
    assert seen == [0, 1, 2]
    # Lightning files the datamodule state under the class's __qualname__.
    assert torch.load(tmp_path / "mid.ckpt", weights_only=False)["SpyDataModule"]["consumed_batches"] == 3

    seen.clear()
    SpyDataModule.calls = []
    _trainer(7).fit(_make_module(seen), datamodule=SpyDataModule(**kwargs), ckpt_path=tmp_path / "mid.ckpt")
    assert seen == [3, 4, 5, 6], seen  # the rest of epoch 0, then epoch 1 from its start
    # Lightning restores the datamodule state before it asks for the train loader.
    assert SpyDataModule.calls == ["load_state_dict", "train_dataloader"], SpyDataModule.calls

    # The DataModule's own state suffices: strip the copy Lightning keeps for the loader.
    checkpoint = torch.load(tmp_path / "mid.ckpt", weights_only=False)
    assert checkpoint["loops"]["fit_loop"]["state_dict"].pop("combined_loader") == [{"consumed_batches": 3}]
    torch.save(checkpoint, tmp_path / "datamodule_only.ckpt")
    seen.clear()
    _trainer(5).fit(_make_module(seen), datamodule=SpyDataModule(**kwargs), ckpt_path=tmp_path / "datamodule_only.ckpt")
    assert seen == [3, 4], seen


def test_validation_batches_do_not_advance_training_stream() -> None:
    import lightning.pytorch as pl

    train_seen: list[int] = []
    val_seen: list[int] = []

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def training_step(self, batch, batch_idx):
            train_seen.append(batch["index"])
            return (self.weight - 1.0).pow(2).sum()

        def validation_step(self, batch, batch_idx):
            val_seen.append(batch["index"])
            assert all(p.id.startswith("synthetic-easy-heldout-") for p in batch["problems"])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    dm = MathDataModule(
        sources={"easy": "synthetic:easy"}, prompts_per_step=2, steps_per_epoch=3, val_size=3, val_batch_size=2
    )
    _trainer(4, sanity_steps=1).fit(Module(), datamodule=dm)
    assert train_seen == [0, 1, 2, 3]
    assert val_seen == [0] + [0, 1]  # the sanity check (1 batch), then the end of epoch 0
    assert dm.consumed_batches == 4


def test_yaml_config_through_jsonargparse() -> None:
    # LightningCLI builds the data module with jsonargparse from the typed __init__ arguments.
    from jsonargparse import ArgumentParser

    parser = ArgumentParser()
    parser.add_class_arguments(MathDataModule, "data")
    config = parser.parse_string(
        "data:\n  sources: {easy: synthetic:easy, hard: synthetic:hard}\n  weights: {easy: 1.0}\n"
        "  schedule: [{step: 10, weights: {hard: 1.0}}]\n  prompts_per_step: 8\n"
    )
    dm = parser.instantiate(config).data
    assert isinstance(dm, MathDataModule) and dm.prompts_per_step == 8
    assert dm.weights_at(9) == {"easy": 1.0, "hard": 0.0} and dm.weights_at(10) == {"easy": 0.0, "hard": 1.0}


# ---------------------------------------------------------------- prompts
def tiny_tokenizer(chat_template: str | None):
    """A word-level tokenizer built in memory; it adds <s> in front when asked for special tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    corpus = (
        "Question What is 2 + 3 ? Please reason step by step , and put your final answer within \\ boxed { } . "
        "Answer : user assistant system Be brief"
    )
    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>"] + sorted(set(corpus.split())))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.add_special_tokens(["<unk>", "<s>", "</s>"])
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    if chat_template:
        tokenizer.chat_template = chat_template
    return tokenizer


CHAT_TEMPLATE = (
    "<s>{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def test_prompt_formatter_chat_template() -> None:
    tokenizer = tiny_tokenizer(CHAT_TEMPLATE)
    formatter = PromptFormatter()  # auto
    assert formatter.resolved_style(tokenizer) == "chat"
    text = formatter.format("What is 2 + 3?", tokenizer)
    assert text == (
        "<s>user: What is 2 + 3?\nPlease reason step by step, and put your final answer within \\boxed{}.\nassistant:"
    )
    ids = formatter.encode(["What is 2 + 3?"], tokenizer)[0]
    bos = tokenizer.convert_tokens_to_ids("<s>")
    assert ids == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids[0] == bos and ids.count(bos) == 1  # the template's BOS only, not a second one
    with_system = PromptFormatter(system_prompt="Be brief").format("What is 2 + 3?", tokenizer)
    assert with_system.startswith("<s>system: Be brief\nuser: What is 2 + 3?")


def test_prompt_formatter_plain_for_base_models() -> None:
    tokenizer = tiny_tokenizer(None)
    formatter = PromptFormatter()
    assert formatter.resolved_style(tokenizer) == "plain"
    text = formatter.format("What is 2 + 3?", tokenizer)
    assert (
        text
        == "Question: What is 2 + 3?\nPlease reason step by step, and put your final answer within \\boxed{}.\nAnswer:"
    )
    batch = formatter.encode(["What is 2 + 3?", "What is 3 + 2?"], tokenizer)
    bos = tokenizer.convert_tokens_to_ids("<s>")
    assert len(batch) == 2 and all(ids[0] == bos and ids.count(bos) == 1 for ids in batch)  # tokenizer's own BOS
    assert batch[0] == tokenizer(text)["input_ids"]
    assert PromptFormatter(style="plain", instruction="").format("Hi", tokenizer) == "Question: Hi\nAnswer:"
    # Plain style on a chat tokenizer is allowed (base-model prompts); chat without a template is not.
    assert PromptFormatter(style="plain").format("Hi", tiny_tokenizer(CHAT_TEMPLATE)).startswith("Question: Hi")
    with pytest.raises(ValueError, match="no chat_template"):
        PromptFormatter(style="chat").format("Hi", tokenizer)
