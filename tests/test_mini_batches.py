"""Mini-batch splits: whole groups per optimizer step, and several ranks = one process."""

from __future__ import annotations

import pytest
import torch

from lite_ppo.ops import mini_batch_rows


def test_group_split_keeps_groups_whole_and_uses_every_row_once():
    # 6 groups of 4, rows of a group not adjacent (interleaved by two), ids not in first-seen order
    group_ids = torch.tensor([5, 5, 2, 2, 5, 5, 2, 2, 9, 9, 0, 0, 9, 9, 0, 0, 7, 7, 3, 3, 7, 7, 3, 3])
    parts = mini_batch_rows(group_ids, 3, split="group")
    assert sorted(torch.cat(parts).tolist()) == list(range(24))
    # first-seen order 5, 2, 9, 0, 7, 3 -> group k goes to part k % 3
    expected = [{5, 0}, {2, 7}, {9, 3}]
    for part, groups in zip(parts, expected):
        assert set(group_ids[part].tolist()) == groups
        for g in groups:  # all four rows of each of its groups
            assert int((group_ids[part] == g).sum()) == 4
        assert part.tolist() == sorted(part.tolist())


def test_row_split_is_strided():
    group_ids = torch.arange(4).repeat_interleave(2)
    assert [p.tolist() for p in mini_batch_rows(group_ids, 2, split="row")] == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_group_split_falls_back_to_rows_when_groups_do_not_divide():
    group_ids = torch.arange(3).repeat_interleave(4)  # 3 groups, 12 rows, 2 mini-batches
    assert [p.tolist() for p in mini_batch_rows(group_ids, 2, split="group")] == [
        list(range(0, 12, 2)),
        list(range(1, 12, 2)),
    ]


@pytest.mark.parametrize("split", ["group", "row"])
@pytest.mark.parametrize(("groups", "group_size", "ranks", "m"), [(8, 4, 2, 2), (8, 2, 4, 2), (12, 3, 2, 3)])
def test_union_over_ranks_is_the_single_process_split(split, groups, group_size, ranks, m):
    """Each rank holds a contiguous equal share of the global batch: the union over ranks of each
    rank's mini-batch j is mini-batch j of one process on the whole batch."""
    group_ids = torch.arange(groups).repeat_interleave(group_size)
    single = mini_batch_rows(group_ids, m, split=split)
    share = len(group_ids) // ranks
    for j in range(m):
        union = torch.cat(
            [
                r * share + mini_batch_rows(group_ids[r * share : (r + 1) * share], m, split=split)[j]
                for r in range(ranks)
            ]
        )
        assert sorted(union.tolist()) == single[j].tolist()


def test_refuses_batches_that_do_not_divide_and_unknown_splits():
    with pytest.raises(ValueError, match="not divisible by num_mini_batches=3"):
        mini_batch_rows(torch.zeros(8, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="split must be one of"):
        mini_batch_rows(torch.zeros(8, dtype=torch.long), 2, split="prompt")


def test_module_refuses_an_unknown_split_in_one_line():
    from lite_ppo.errors import UserError
    from lite_ppo.training.module import LitePPO

    with pytest.raises(UserError, match=r"model.mini_batch_split='prompt': choose group or row"):
        LitePPO(mini_batch_split="prompt")
