"""The comparison figures tell every group apart and keep their legend inside the image: read from the
matplotlib figures ``lite-ppo compare`` saves (their artists and the renderer's extents, not pixels)."""

from __future__ import annotations

import matplotlib.colors
import pytest
import yaml
from matplotlib.container import ErrorbarContainer

from helpers.compare_runs import write_run
from lite_ppo import metric_names as m
from lite_ppo.research import figures
from lite_ppo.research.compare import main as compare_main
from lite_ppo.research.runs import RunGroup

LONG = "/data/problems/a-long-common-prefix-shared-by-every-variant-of-this-study"


@pytest.fixture
def saved(monkeypatch) -> list[dict]:
    """What each figure held when it was saved: per panel the groups' (colour, line style) and the
    extents of its legends, caption and axes, rendered at the dpi it is saved at."""
    found: list[dict] = []
    original = figures._save

    def spy(fig, path, dpi):
        fig.set_dpi(dpi)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        panels = []
        for ax in fig.axes:
            if not ax.get_visible():
                continue
            lines = {}
            for handle, label in zip(*ax.get_legend_handles_labels()):
                line = handle.lines[0] if isinstance(handle, ErrorbarContainer) else handle
                if line.get_linestyle() not in ("None", "none", ""):  # a single point has no line
                    lines[label.rsplit(" (n=", 1)[0]] = (
                        matplotlib.colors.to_hex(line.get_color()),
                        line.get_linestyle(),
                    )
            panels.append({"lines": lines, "box": ax.get_tightbbox(renderer)})
        legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        texts = [fig._suptitle] if fig._suptitle is not None else []
        found.append(
            {
                "name": path.name,
                "figure": fig.bbox.frozen(),
                "panels": panels,
                "legends": [(len(lg.get_texts()), lg.get_window_extent(renderer)) for lg in legends],
                "texts": [t.get_window_extent(renderer) for t in texts],
            }
        )
        original(fig, path, dpi)

    monkeypatch.setattr(figures, "_save", spy)
    return found


def _inside(box, outer, tol: float = 0.5) -> bool:
    return (
        box.x0 >= outer.x0 - tol and box.y0 >= outer.y0 - tol and box.x1 <= outer.x1 + tol and box.y1 <= outer.y1 + tol
    )


def _check(saved: list[dict], n_groups: int) -> None:
    assert saved and saved[0]["name"] == "overview.png"
    colours: dict[str, set] = {}
    for fig in saved:
        # Every figure has one legend naming every group, inside the image, below the panels' labels.
        assert len(fig["legends"]) == 1, fig["name"]
        entries, legend = fig["legends"][0]
        assert entries >= 1
        assert _inside(legend, fig["figure"]), (fig["name"], legend, fig["figure"])
        for text in fig["texts"]:
            assert _inside(text, fig["figure"]), (fig["name"], text, fig["figure"])
        for panel in fig["panels"]:
            assert legend.y1 <= panel["box"].y0 + 0.5, fig["name"]  # under the panel, hiding none of it
            pairs = list(panel["lines"].values())
            assert len(set(pairs)) == len(pairs), (fig["name"], panel["lines"])  # no two groups alike
            for label, (colour, _) in panel["lines"].items():
                colours.setdefault(label, set()).add(colour)
    assert len(colours) == n_groups  # every group drew a line
    assert all(len(c) == 1 for c in colours.values())  # a group keeps its colour in every panel


def test_six_variants_of_one_recipe_are_told_apart_and_the_legend_fits(tmp_path, saved):
    """Six groups of one recipe that differ in a long data path: one colour per recipe drew all six in
    blue and the fifth in the first one's line style; their long labels ran out of the 5-inch panels."""
    root = tmp_path / "runs"
    for i in range(6):
        for seed in (0, 1):
            run_dir = write_run(root / f"v{i}", "alpha", seed, 6, 0.5 + 0.05 * i, 0.0, clip=True)
            config = yaml.safe_load((run_dir / "config.yaml").read_text())
            config["data"]["file"] = f"{LONG}/variant-{i}.jsonl"
            (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    assert compare_main([str(root), "--out", str(tmp_path / "cmp")]) == 0
    assert len(saved) > 2  # the overview and a figure per quantity
    _check(saved, 6)


def test_twelve_groups_on_one_narrow_panel(tmp_path, saved):
    """One quantity logged, so the overview is one panel wide (3.6 inches) with a caption and labels wider
    than that; twelve recipes: tab10 gave the eleventh and twelfth the first two's colour and line."""
    from torch.utils.tensorboard import SummaryWriter

    root = tmp_path / "runs"
    for i in range(12):
        for seed in (0, 1):
            writer = SummaryWriter(str(root / f"recipe-{i:02d}-with-a-name-longer-than-one-panel" / f"seed{seed}"))
            for step in range(4):
                writer.add_scalar(m.REWARD_ACCURACY, 0.1 * step + 0.01 * i + 0.02 * seed, step)
            writer.close()
    assert compare_main([str(root), "--out", str(tmp_path / "cmp")]) == 0
    assert [fig["name"] for fig in saved] == ["overview.png", "reward_accuracy.png"]
    _check(saved, 12)


@pytest.mark.parametrize("n", [1, 2, 10, 11, 40, 41, 97, 500])
def test_every_group_gets_its_own_colour_and_line_style(n):
    groups = [RunGroup(label=f"g{i}", recipe="one") for i in range(n)]
    styles = figures.group_styles(groups)
    assert len(styles) == n
    assert len({(s.colour, s.linestyle) for s in styles}) == n
    # Up to ten groups: ten colours, all solid lines (line styles only once the colours run out).
    if n <= 10:
        assert len({s.colour for s in styles}) == n and {s.linestyle for s in styles} == {"-"}
