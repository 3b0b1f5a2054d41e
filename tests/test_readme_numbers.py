"""README and docs quote no result by hand: their result tables are blocks generated from the committed snapshot
docs/results/ (analysis/snapshot.py), and this checks they are equal to it; every relative link of README.md and
docs/*.md resolves."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "docs" / "results"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# every block the snapshot writes, and the page that shows it
BLOCKS = {"claims": "README.md", "headline": "docs/results.md", "regime": "docs/results.md",
          "step0": "docs/results.md", "timing": "docs/results.md", "machine": "docs/results.md",
          "bench_trainer": "docs/results.md", "bench_advantages": "docs/estimators.md",
          "bench_verl_cpu": "docs/verl.md", "verl_cpu_timing": "docs/verl.md", "verl_cpu_backends": "docs/verl.md",
          "verl_cpu_rerun": "docs/verl.md", "backends": "docs/trl.md", "diagnostics_toolcall": "docs/diagnose.md",
          "ledger_claims": "docs/results.md", "replicates": "docs/results.md",
          "denser_regime": "docs/results.md", "criteria": "docs/results.md", "replicate_criteria": "docs/results.md"}
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _check(readme: Path, snapshot: Path = SNAPSHOT, docs: Path = ROOT / "docs") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "analysis" / "snapshot.py"), "--check", "--readme", str(readme),
                           "--snapshot", str(snapshot), "--docs", str(docs)], capture_output=True, text=True, cwd=ROOT)


def test_the_readme_and_docs_show_the_snapshots_numbers():
    for name, page in BLOCKS.items():
        assert f"<!-- snapshot:{name} -->" in (ROOT / page).read_text() and (SNAPSHOT / f"{name}.md").is_file(), name
    assert "revision: " in (SNAPSHOT / "REVISION").read_text()
    result = _check(ROOT / "README.md")
    assert result.returncode == 0, result.stderr


def test_a_hand_edited_number_is_caught(tmp_path):
    for page, name in ((ROOT / "README.md", "claims"), (ROOT / "docs" / "results.md", "headline")):
        text = page.read_text()
        start, end = text.index(f"<!-- snapshot:{name} -->"), text.index(f"<!-- /snapshot:{name} -->")
        block = text[start:end]
        digit = next(i for i, c in enumerate(block) if c.isdigit() and i > len(f"<!-- snapshot:{name} -->"))
        edited = text[:start] + block[:digit] + str((int(block[digit]) + 1) % 10) + block[digit + 1:] + text[end:]
        docs = tmp_path / page.stem / "docs"
        docs.mkdir(parents=True)
        copy = tmp_path / page.stem / "README.md"
        if page.name == "README.md":
            copy.write_text(edited)
        else:
            copy.write_text((ROOT / "README.md").read_text())
            (docs / page.name).write_text(edited)
        assert _check(copy, docs=docs).returncode != 0, page


def test_a_block_can_show_a_record_kept_beside_the_snapshot(tmp_path):
    # `<!-- snapshot:second_machine/claims -->` is filled from docs/results/second_machine/claims.md, checked as the
    # snapshot's own blocks are, and a block whose file is missing is an error that names it
    snapshot = tmp_path / "snapshot"
    (snapshot / "second_machine").mkdir(parents=True)
    table = "| claim | verdict |\n|---|---|\n| x | {} |\n"
    (snapshot / "second_machine" / "claims.md").write_text(table.format("supported"))
    block = "<!-- snapshot:second_machine/claims -->\n{}<!-- /snapshot:second_machine/claims -->\n"
    readme, docs = tmp_path / "README.md", tmp_path / "docs"
    docs.mkdir()

    readme.write_text("intro\n" + block.format(table.format("supported")))
    assert _check(readme, snapshot, docs).returncode == 0
    readme.write_text("intro\n" + block.format(table.format("not informative")))
    assert _check(readme, snapshot, docs).returncode != 0
    (snapshot / "second_machine" / "claims.md").unlink()
    result = _check(readme, snapshot, docs)
    assert result.returncode != 0 and "second_machine/claims.md" in result.stderr


def test_every_relative_link_of_the_readme_and_docs_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:", "#")):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_blocks_refills_a_page_from_the_snapshot_and_takes_nothing_else(tmp_path):
    """``--blocks`` (after a benchmark rewrote its page in the snapshot) writes the pages' blocks from the snapshot as
    it is: a stale block becomes current, the snapshot itself is untouched."""
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "bench.md").write_text("1.40x\n")
    readme, docs = tmp_path / "README.md", tmp_path / "docs"
    docs.mkdir()
    readme.write_text("intro\n<!-- snapshot:bench -->\n1.27x\n<!-- /snapshot:bench -->\nafter\n")
    assert _check(readme, snapshot, docs).returncode != 0
    done = subprocess.run([sys.executable, str(ROOT / "analysis" / "snapshot.py"), "--blocks", "--readme", str(readme),
                           "--snapshot", str(snapshot), "--docs", str(docs)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert readme.read_text() == "intro\n<!-- snapshot:bench -->\n1.40x\n<!-- /snapshot:bench -->\nafter\n"
    assert _check(readme, snapshot, docs).returncode == 0
    assert sorted(path.name for path in snapshot.iterdir()) == ["bench.md"]
