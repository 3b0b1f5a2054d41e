"""Each claim's verdict in the study and in its independent replicate, side by side (`make replicate`):
<out>/replicates.{csv,md} from the claims.csv of both (dara.analysis.replicates: agreement, and for a claim whose
verdict differs, "undecided at this power" with the seeds per arm a power calculation from the pooled effect needs);
and the calibration's regime criteria read on both draws, <out>/replicate_criteria.{csv,md} from the criteria.csv
of both (dara.analysis.criteria: met in both, in neither, or in one of the two).
"""

import argparse
from pathlib import Path

import pandas as pd

from dara.analysis import criteria
from dara.analysis.replicates import compare, markdown
from dara.io import write_csv_atomic, write_text_atomic


def tables_of_both(parser, study: Path, replicate: Path, name: str) -> list[pd.DataFrame]:
    frames = []
    for folder in (study, replicate):
        path = folder / "tables" / name
        if not path.is_file():
            parser.error(f"no {path}: run the analysis of {folder} first (make reproduce, make replicate)")
        frames.append(pd.read_csv(path))
    return frames


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", type=Path, required=True, help="the study's results folder (results/tiny)")
    parser.add_argument("--replicate", type=Path, required=True, help="the replicate's (results/tiny_replicate)")
    parser.add_argument("--out", type=Path, required=True, help="folder of replicates.csv and replicates.md")
    args = parser.parse_args(argv)
    claims = tables_of_both(parser, args.study, args.replicate, "claims.csv")
    readings = tables_of_both(parser, args.study, args.replicate, "criteria.csv")
    comparison = compare(*claims)
    write_csv_atomic(args.out / "replicates.csv", comparison)
    agree = int((comparison["verdict_study"] == comparison["verdict_replicate"]).sum())
    text = [f"# Claims in two independent replicates ({args.study.name} and {args.replicate.name})", "",
            f"{agree} of {len(comparison)} claims have the same verdict in both. Written by analysis/replicates.py "
            "(dara.analysis.replicates: how the warm starts needed are computed).", "", markdown(comparison), ""]
    write_text_atomic(args.out / "replicates.md", "\n".join(text))
    print("\n".join(text))
    paired = criteria.compare_draws(*readings)
    write_csv_atomic(args.out / "replicate_criteria.csv", paired)
    text = [f"# The calibration's regime criteria in two independent replicates ({args.study.name} and "
            f"{args.replicate.name})", "",
            "Each reading of tables/criteria.md (analysis/criteria.py) in both draws. A criterion met in one draw "
            "of the two holds for that draw, not for the settings. Written by analysis/replicates.py.", "",
            criteria.paired_summary(paired), "", criteria.paired_markdown(paired), ""]
    write_text_atomic(args.out / "replicate_criteria.md", "\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()
