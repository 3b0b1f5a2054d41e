"""README quotes no result by hand: its result tables are blocks generated from the committed snapshot docs/results/
(analysis/snapshot.py), and this checks they are equal to it."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "docs" / "results"
BLOCKS = ("headline", "claims", "regime", "step0", "timing", "bench_trainer", "bench_advantages", "bench_verl_cpu",
          "backends", "verl_cpu_timing", "verl_cpu_backends", "verl_cpu_rerun", "second_machine/rerun_4eb8cf2/claims",
          "second_machine/timing")


def _check(readme: Path, snapshot: Path = SNAPSHOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "analysis" / "snapshot.py"), "--check", "--readme", str(readme),
                           "--snapshot", str(snapshot)], capture_output=True, text=True, cwd=ROOT)


def test_the_readme_shows_the_snapshots_numbers():
    readme = (ROOT / "README.md").read_text()
    for name in BLOCKS:
        assert f"<!-- snapshot:{name} -->" in readme and (SNAPSHOT / f"{name}.md").is_file(), name
    assert "revision: " in (SNAPSHOT / "REVISION").read_text()
    result = _check(ROOT / "README.md")
    assert result.returncode == 0, result.stderr


def test_a_hand_edited_number_is_caught(tmp_path):
    readme = (ROOT / "README.md").read_text()
    start = readme.index("<!-- snapshot:headline -->")
    end = readme.index("<!-- /snapshot:headline -->")
    block = readme[start:end]
    digit = next(i for i, c in enumerate(block) if c.isdigit() and i > len("<!-- snapshot:headline -->"))
    edited = block[:digit] + str((int(block[digit]) + 1) % 10) + block[digit + 1:]
    copy = tmp_path / "README.md"
    copy.write_text(readme[:start] + edited + readme[end:])
    assert _check(copy).returncode != 0


def test_a_block_can_show_a_record_kept_beside_the_snapshot(tmp_path):
    # `<!-- snapshot:second_machine/claims -->` is filled from docs/results/second_machine/claims.md, checked as the
    # snapshot's own blocks are, and a block whose file is missing is an error that names it
    snapshot = tmp_path / "snapshot"
    (snapshot / "second_machine").mkdir(parents=True)
    table = "| claim | verdict |\n|---|---|\n| x | {} |\n"
    (snapshot / "second_machine" / "claims.md").write_text(table.format("supported"))
    block = "<!-- snapshot:second_machine/claims -->\n{}<!-- /snapshot:second_machine/claims -->\n"
    readme = tmp_path / "README.md"

    readme.write_text("intro\n" + block.format(table.format("supported")))
    assert _check(readme, snapshot).returncode == 0
    readme.write_text("intro\n" + block.format(table.format("not informative")))
    assert _check(readme, snapshot).returncode != 0
    (snapshot / "second_machine" / "claims.md").unlink()
    result = _check(readme, snapshot)
    assert result.returncode != 0 and "second_machine/claims.md" in result.stderr
