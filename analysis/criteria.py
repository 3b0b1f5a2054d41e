"""The calibration's regime criteria read on this draw: results/<scale>/tables/criteria.{csv,md}.

Each criterion of docs/tiny_scale.md ("Calibration"), with its bounds and readings in analysis/config.yaml
(``regime_criteria``), read on the tables the pipeline wrote (tables/regime.csv, tables/first_crossing.csv,
figures/fig5.csv; `dara.analysis.criteria` says how). A draw whose settings were chosen on these criteria shows here
whether its own runs are still in that regime; `make replicate` puts the study's and the replicate's readings side by
side.
"""

import argparse
from pathlib import Path

import pandas as pd

from dara.analysis.config import load_analysis_config
from dara.analysis.criteria import markdown, read_criteria, summary
from dara.io import write_csv_atomic, write_text_atomic


def read_table(path: Path, required: bool) -> pd.DataFrame | None:
    if path.is_file():
        return pd.read_csv(path)
    if required:
        raise SystemExit(f"no {path}: the criteria are read on it (run its analysis rule first)")
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", required=True, help="scale name or experiment yaml (its analysis block applies)")
    parser.add_argument("--config", default="analysis/config.yaml")
    parser.add_argument("--regime", type=Path, required=True, help="tables/regime.csv")
    parser.add_argument("--first-crossing", type=Path, required=True, help="tables/first_crossing.csv")
    parser.add_argument("--stable", type=Path, required=True, help="figures/fig5.csv (stable crossings)")
    parser.add_argument("--out-dir", type=Path, required=True, help="results/<scale>: writes tables/criteria.*")
    args = parser.parse_args(argv)
    config = load_analysis_config(args.config, args.scale)
    if "regime_criteria" not in config:
        raise SystemExit(f"{args.config} (scale {config['scale']}) states no regime_criteria")
    table = read_criteria(read_table(args.regime, required=True), read_table(args.first_crossing, required=False),
                          read_table(args.stable, required=False), config)
    tables = args.out_dir / "tables"
    write_csv_atomic(tables / "criteria.csv", table)
    text = [f"# The calibration's regime criteria on this draw ({config['scale']} scale)", "",
            "Each criterion of docs/tiny_scale.md (\"Calibration\"), with the bounds stated there before the "
            "calibration's pilots and the readings of analysis/config.yaml (`regime_criteria`), read on this draw's "
            "tables (regime.csv, first_crossing.csv, fig5.csv): on the median over warm starts where a task's runs "
            "start from several, else medians over seeds. Bounds are inclusive.", "", summary(table), "",
            markdown(table), ""]
    write_text_atomic(tables / "criteria.md", "\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()
