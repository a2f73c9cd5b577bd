"""Where the repository and the shared data folder are."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path | None:
    """../shared/data beside the checkout (or $LITE_PPO_SHARED_DATA), None when absent."""
    env = os.environ.get("LITE_PPO_SHARED_DATA")
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data"]
    return next((c for c in candidates if (c / "eval").is_dir()), None)
