"""What a user sees first in TensorBoard: the CUSTOM SCALARS tab leads with training and held-out
accuracy, and since the TIME SERIES tab sorts tag groups by name (``clip/`` first), the address in
docs/tensorboard.md pins the key cards above them, in the form TensorBoard reads pins from an address."""

from __future__ import annotations

import json
import re
import urllib.parse

from helpers.paths import REPO
from lite_ppo import metric_names as names


def _pins(url: str) -> list[dict]:
    parts = urllib.parse.urlsplit(url)
    assert parts.fragment == "timeseries"
    (value,) = urllib.parse.parse_qs(parts.query)["pinnedCards"]
    return json.loads(value)


def test_the_custom_scalars_open_on_training_and_held_out_accuracy():
    layout = names.custom_scalars_layout(["easy", "medium", "hard"])
    first_category = next(iter(layout.values()))  # TensorBoard shows categories in the layout's order
    patterns = [tags[0] for _, tags in first_category.values()]
    expected = ["reward/accuracy", "val/easy/accuracy", "val/medium/accuracy", "val/hard/accuracy"]
    assert [re.fullmatch(p, tag) is not None for p, tag in zip(patterns, expected)] == [True] * 4


def test_the_time_series_address_pins_the_key_cards_first():
    pins = _pins(names.time_series_url(["easy", "medium", "hard"]))
    # As TensorBoard accepts a pinned scalar card: plugin and tag, no run (scalar pins are per tag).
    assert all(set(pin) == {"plugin", "tag"} and pin["plugin"] == "scalars" for pin in pins)
    tags = [pin["tag"] for pin in pins]
    assert tags[:5] == [
        "reward/accuracy",
        "val/easy/accuracy",
        "val/medium/accuracy",
        "val/hard/accuracy",
        "policy/approx_kl",
    ]
    assert len(tags) == len(set(tags)) == 10  # TensorBoard keeps at most 10 pins
    assert set(tags) <= set(names.SCALARS) | {names.val_accuracy(t) for t in ("easy", "medium", "hard")}
    # A run with one tier that evaluates benchmarks: its benchmark average right after its held-out accuracy.
    one = [pin["tag"] for pin in _pins(names.time_series_url(["easy"], benchmarks=True))]
    assert one[:4] == ["reward/accuracy", "val/easy/accuracy", "eval/average/accuracy", "policy/approx_kl"]
    # Without held-out problems no val/ card is pinned (it would stay empty).
    assert not [t for t in _pins(names.time_series_url(["easy"], held_out=[])) if t["tag"].startswith("val/")]


def test_the_time_series_tab_would_open_on_clip_and_the_doc_gives_the_pinning_address():
    """The doc's reason to pin: the always-logged tags' prefixes, sorted as TensorBoard sorts its groups,
    start with clip/ and groups/ (reward/ comes late); and the address it gives is the current one."""
    prefixes = sorted({tag.split("/", 1)[0] for tag in names.SCALARS})
    assert prefixes[:2] == ["clip", "groups"] and prefixes.index("reward") > 2
    page = (REPO / "docs" / "tensorboard.md").read_text(encoding="utf-8")
    assert names.time_series_url(["easy", "medium", "hard"]) in page
