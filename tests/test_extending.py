"""docs/extending.md stays true: every file it names exists, and for the methods and tasks that exist nothing its
lists ask for is missing (the loop reference, the methods doc, the analysis config, the experiment files)."""

import re
from pathlib import Path

import pytest
import yaml

from dara.advantages_loop import LOOP_METHODS, loop_advantages
from dara.methods import METHODS
from dara.tasks import TASK_NAMES

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "docs" / "extending.md").read_text()


def test_every_file_the_guide_names_exists():
    named = {path for path in re.findall(r"`([^`\s]+)`", GUIDE) if "/" in path and "<" not in path and "*" not in path}
    assert {"src/dara/methods.py", "src/dara/advantages_loop.py", "analysis/config.yaml"} <= named
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, missing


def test_every_method_has_its_loop_reference_and_its_row_in_the_methods_doc():
    assert set(LOOP_METHODS) == set(METHODS)
    with pytest.raises(ValueError, match="no loop reference for method 'gdpo_v2'"):
        loop_advantages("gdpo_v2", [[0.0], [1.0]], [0, 0])
    methods_doc = (ROOT / "docs" / "methods.md").read_text()
    rows = [line for line in methods_doc.splitlines() if line.startswith("| `")]
    for method in METHODS:
        assert any(f"`{method}`" in row for row in rows), f"docs/methods.md has no row for {method}"


def test_every_task_is_in_the_analysis_config_and_the_cpu_experiments():
    config = yaml.safe_load((ROOT / "analysis" / "config.yaml").read_text())
    for block in ("crossing_thresholds", "heldout_correctness", "backend_comparison"):
        assert set(TASK_NAMES) <= set(config[block]), (block, set(TASK_NAMES) - set(config[block]))
    for scale in ("tiny", "smoke"):
        experiment = yaml.safe_load((ROOT / "experiments" / f"{scale}.yaml").read_text())
        assert set(TASK_NAMES) <= set(experiment["tasks"]), scale


def test_the_analysis_names_no_scale_and_loads_every_one():
    """Adding a scale touches no analysis code: the scripts take any experiment, and what differs at a scale is in
    its experiment file's analysis block (analysis/snapshot.py is `make snapshot`, the tool of the tiny and
    verl_cpu snapshots, and names them as its defaults)."""
    from dara.analysis.config import load_analysis_config

    scales = {yaml.safe_load(path.read_text())["scale"] for path in (ROOT / "experiments").glob("*.yaml")}
    sources = [*sorted((ROOT / "src/dara/analysis").glob("*.py")),
               *sorted(p for p in (ROOT / "analysis").glob("*.py") if p.name != "snapshot.py")]
    quoted = "|".join(scales)
    # a scale compared by name, or offered as a fixed choice (a backend called "tiny" is not a scale)
    by_name = re.compile(rf"""scale\S*\s*(?:==|!=|in)\s*\(?["'](?:{quoted})["']|choices=\([^)]*["'](?:{quoted})["']""")
    for path in sources:
        found = by_name.findall(path.read_text())
        assert not found, f"{path.relative_to(ROOT)} decides by scale name: {found}"
    for scale in scales:
        config = load_analysis_config(ROOT / "analysis/config.yaml", scale)
        assert config["scale"] == scale and isinstance(config["paper_setting"], bool)