"""dara diagnose: density, DARA's weight, every method's energy share and a verdict per step and reward, from a
rollout table in any of the formats it reads; named errors on bad input."""

import json

import numpy as np
import pandas as pd
import pytest

from dara.__main__ import main as dara_main
from dara.diagnose import DiagnoseError, diagnose, read_rollouts, run_verdict
from dara.methods import METHODS


def _worked_example(groups=10, size=4, step=0):
    """Densities 0.8 (format) and 0.2 (correctness): groups 0-7 vary in format, groups 0-1 in correctness."""
    rows = []
    for g in range(groups):
        for i in range(size):
            rows.append({"uid": f"s{step}-p{g}", "step": step, "format": float(g < 8 and i == 0),
                         "correctness": float(g < 2 and i == 1)})
    return pd.DataFrame(rows)


def test_the_papers_worked_example():
    result = diagnose(_worked_example(), "uid", ["format", "correctness"]).table.set_index("reward")
    assert result.loc["format", "density"] == pytest.approx(0.8)
    assert result.loc["correctness", "density"] == pytest.approx(0.2)
    # sqrt(0.8 / 0.2) = 2, under the cap 5
    assert result.loc["format", "dara_weight"] == 1.0 and result.loc["correctness", "dara_weight"] == pytest.approx(2)
    # per-reward normalisation: energy B * pi_k * (G - 1) per reward, so shares 0.8 : 0.2; DARA-Sym's w^2 evens them
    assert result.loc["correctness", "energy_share_gdpo"] == pytest.approx(0.2)
    assert result.loc["correctness", "energy_share_dara_sym"] == pytest.approx(0.5)
    assert result.loc["correctness", "energy_share_shuffled"] == pytest.approx(0.2)
    # ratio 0.8 / 0.2 = 4 reaches the default sparse ratio; the densest reward is balanced
    assert result.loc["correctness", "verdict"] == "sparse" and result.loc["format", "verdict"] == "balanced"
    assert diagnose(_worked_example(), "uid", ["format", "correctness"], sparse_ratio=5).table[
        "verdict"].tolist() == ["balanced", "balanced"]
    # the cap binds: w_max 1.5
    capped = diagnose(_worked_example(), "uid", ["format", "correctness"], w_max=1.5).table
    assert capped["dara_weight"].tolist() == [1.0, 1.5]


def test_static_methods_need_their_weights_and_get_them():
    table = diagnose(_worked_example(), "uid", ["format", "correctness"]).table
    assert table["energy_share_static_sym"].isna().all()
    weighted = diagnose(_worked_example(), "uid", ["format", "correctness"], static_weights=[1, 2]).table
    assert weighted.set_index("reward").loc["correctness", "energy_share_static_sym"] == pytest.approx(0.5)
    with pytest.raises(DiagnoseError, match="one weight per reward"):
        diagnose(_worked_example(), "uid", ["format", "correctness"], static_weights=[1])


def test_steps_are_diagnosed_separately_and_the_run_verdict_counts_them():
    later = _worked_example(step=1)
    later["correctness"] = later["format"]  # step 1: both rewards vary in the same 8 groups
    table = diagnose(pd.concat([_worked_example(), later]), "uid", ["format", "correctness"], "step").table
    assert table["step"].tolist() == [0, 0, 1, 1]
    assert table.set_index(["step", "reward"]).loc[(1, "correctness"), "verdict"] == "balanced"
    assert run_verdict(table) == {"format": 0.0, "correctness": 0.5}
    # an inactive reward
    quiet = _worked_example().assign(correctness=0.0)
    assert diagnose(quiet, "uid", ["format", "correctness"]).table["verdict"].tolist() == ["balanced", "inactive"]
    from dara.diagnose import report

    assert "Verdict: imbalanced" in report(diagnose(quiet, "uid", ["format", "correctness"]), "x", "uid", None, 4.0)
    # no reward varies anywhere: not "balanced"
    silent = diagnose(quiet.assign(format=1.0), "uid", ["format", "correctness"])
    assert "Verdict: no signal" in report(silent, "x", "uid", None, 4.0)


@pytest.mark.parametrize("kind", ["csv", "parquet", "jsonl", "folder"])
def test_the_command_writes_the_scripting_contract(tmp_path, kind, capsys):
    frame = pd.concat([_worked_example(step=0), _worked_example(step=3)])
    if kind == "csv":
        source = tmp_path / "rollouts.csv"
        frame.to_csv(source, index=False)
    elif kind == "parquet":
        source = tmp_path / "rollouts.parquet"
        frame.to_parquet(source)
    elif kind == "jsonl":
        source = tmp_path / "rollouts.jsonl"
        frame.to_json(source, orient="records", lines=True)
    else:  # verl's layout: one JSONL per step
        source = tmp_path / "dump"
        source.mkdir()
        for step, rows in frame.groupby("step"):
            rows.to_json(source / f"{step}.jsonl", orient="records", lines=True)
    out = tmp_path / "out"
    dara_main(["diagnose", str(source), "--group", "uid", "--reward", "format", "--reward", "correctness",
               "--step", "step", "--out", str(out)])
    written = pd.read_csv(out / "diagnostics.csv")
    assert list(written.columns[:2]) == ["step", "reward"]
    for column in ["density", "dara_weight", *(f"energy_share_{m}" for m in METHODS), "verdict"]:
        assert column in written.columns
    assert written["step"].tolist() == [0, 0, 3, 3]
    report = (out / "report.md").read_text()
    assert "Verdict: imbalanced" in report and "`correctness`" in report
    assert (out / "diagnostics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "correctness 100%" in capsys.readouterr().out


def test_without_a_step_column_the_table_is_step_0(tmp_path):
    source = tmp_path / "r.csv"
    _worked_example().drop(columns="step").to_csv(source, index=False)
    dara_main(["diagnose", str(source), "--group", "uid", "--reward", "format", "--reward", "correctness",
               "--out", str(tmp_path / "o")])
    assert pd.read_csv(tmp_path / "o" / "diagnostics.csv")["step"].tolist() == [0, 0]


def test_chat_prompts_as_group_ids():
    # TRL logs a conversational prompt as a list of messages; equal lists are one group
    frame = _worked_example(groups=2)
    frame["prompt"] = [[{"role": "user", "content": f"q{k // 4}"}] for k in range(len(frame))]
    assert diagnose(frame, "prompt", ["format"]).table["groups"].tolist() == [2]


def _error(tmp_path, frame_or_text, *extra, suffix=".csv"):
    source = tmp_path / f"bad{suffix}"
    if isinstance(frame_or_text, str):
        source.write_text(frame_or_text)
    else:
        frame_or_text.to_csv(source, index=False)
    with pytest.raises(SystemExit) as stopped:
        dara_main(["diagnose", str(source), "--group", "uid", "--reward", "format", *extra,
                   "--out", str(tmp_path / "o")])
    assert stopped.value.code == 2
    assert not (tmp_path / "o" / "diagnostics.csv").exists()


def test_bad_input_is_refused_with_a_name(tmp_path, capsys):
    _error(tmp_path, _worked_example(), "--reward", "accuracy")
    assert "no column 'accuracy'" in capsys.readouterr().err
    lonely = _worked_example()
    lonely.loc[0, "uid"] = "alone"
    _error(tmp_path, lonely)
    assert "group 'alone' (column 'uid') has one response" in capsys.readouterr().err
    missing = _worked_example()
    missing.loc[5, "format"] = np.nan
    _error(tmp_path, missing)
    assert "'format' has a missing or non-finite value in row 5" in capsys.readouterr().err
    text = _worked_example().astype({"format": object})
    text.loc[7, "format"] = "yes"
    _error(tmp_path, text)
    assert "'format' is not numeric: row 7 holds 'yes'" in capsys.readouterr().err
    _error(tmp_path, "")
    assert "is empty" in capsys.readouterr().err
    _error(tmp_path, "uid,format\n")
    assert "holds no rows" in capsys.readouterr().err
    _error(tmp_path, "x", suffix=".txt")
    assert "unknown file type '.txt'" in capsys.readouterr().err
    _error(tmp_path, _worked_example(), "--w-max", "0.5")
    assert "--w-max must be a finite number >= 1, got 0.5" in capsys.readouterr().err
    _error(tmp_path, _worked_example(), "--reward", "correctness", "--static-weights", "0.5", "1")
    assert "--static-weights must each be a finite number >= 1" in capsys.readouterr().err


def test_an_error_in_a_folder_names_the_file(tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    _worked_example(step=1).to_json(dump / "1.jsonl", orient="records", lines=True)
    later = _worked_example(step=2)
    later.loc[3, "format"] = None
    later.to_json(dump / "2.jsonl", orient="records", lines=True)
    with pytest.raises(DiagnoseError, match=r"row 43 \(file 2.jsonl\)"):
        diagnose(read_rollouts(dump), "uid", ["format"], "step")


def test_mixed_group_sizes_are_handled_and_said():
    frame = _worked_example()
    frame.loc[frame["uid"] == "s0-p9", "uid"] = "s0-p8"  # one group of 8
    diagnosis = diagnose(frame, "uid", ["format", "correctness"])
    assert diagnosis.group_sizes == {0: [4, 8]}
    assert diagnosis.table["groups"].tolist() == [9, 9]
    from dara.diagnose import report
    assert "Group sizes differ within 1 step(s) (step 0: [4, 8])" in report(diagnosis, "x", "uid", None, 4.0)


def test_read_rollouts_refuses_an_empty_folder_and_a_missing_path(tmp_path):
    with pytest.raises(DiagnoseError, match="empty folder"):
        read_rollouts(tmp_path)
    with pytest.raises(DiagnoseError, match="does not exist"):
        read_rollouts(tmp_path / "nothing.csv")
    (tmp_path / "a.jsonl").write_text(json.dumps({"uid": "a", "format": 1}) + "\n")
    assert len(read_rollouts(tmp_path)) == 1


def test_the_installed_command_and_python_dash_m_reach_diagnose():
    import subprocess
    import sys
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["dara"] == "dara.__main__:main"
    shown = subprocess.run([sys.executable, "-m", "dara", "diagnose", "--help"], capture_output=True, text=True)
    assert shown.returncode == 0 and "--group" in shown.stdout
    unknown = subprocess.run([sys.executable, "-m", "dara", "diagnoze"], capture_output=True, text=True)
    assert unknown.returncode != 0 and "unknown command 'diagnoze'" in unknown.stderr
