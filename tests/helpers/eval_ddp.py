"""Worker of test_evaluation's two-process metric test (a small module, so spawned children import little)."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def ddp_records():
    statuses = ["correct", "wrong", "wrong", "wrong", "correct", "correct", "unparsed", "wrong"]
    a = [{"status": s, "length": 10 + i, "truncated": i % 3 == 0} for i, s in enumerate(statuses)]
    b = [{"status": "correct", "length": 5, "truncated": False}, {"status": "no_box", "length": 7, "truncated": True}]
    return [("a", a), ("b", b)]


def worker(rank: int, world: int, port: int, out: str) -> None:
    from lite_ppo.evaluation.results import GroupMetrics

    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        metrics = GroupMetrics(["a", "b"], num_samples=2)
        for group, records in ddp_records():
            # Rank r takes every other problem (a problem = 2 consecutive records); rank 1 never sees "b".
            mine = [rec for i, rec in enumerate(records) if (i // 2) % world == rank]
            if mine:
                metrics.update_records(group, mine)
        results = metrics.compute()
        if rank == 0:
            Path(out).write_text(json.dumps(results))
    finally:
        torch.distributed.destroy_process_group()
