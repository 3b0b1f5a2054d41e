"""Each claim's verdict in the study and in its independent replicate, side by side (`make replicate`):
<out>/replicates.{csv,md} from the claims.csv of both (dara.analysis.replicates: agreement, and for a claim whose
verdict differs, "undecided at this power" with the seeds per arm a power calculation from the pooled effect needs).
"""

import argparse
from pathlib import Path

import pandas as pd

from dara.analysis.replicates import compare, markdown
from dara.io import write_csv_atomic, write_text_atomic


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", type=Path, required=True, help="the study's results folder (results/tiny)")
    parser.add_argument("--replicate", type=Path, required=True, help="the replicate's (results/tiny_replicate)")
    parser.add_argument("--out", type=Path, required=True, help="folder of replicates.csv and replicates.md")
    args = parser.parse_args(argv)
    frames = []
    for folder in (args.study, args.replicate):
        path = folder / "tables" / "claims.csv"
        if not path.is_file():
            parser.error(f"no {path}: run the analysis of {folder} first (make reproduce, make replicate)")
        frames.append(pd.read_csv(path))
    comparison = compare(*frames)
    write_csv_atomic(args.out / "replicates.csv", comparison)
    agree = int((comparison["verdict_study"] == comparison["verdict_replicate"]).sum())
    text = [f"# Claims in two independent replicates ({args.study.name} and {args.replicate.name})", "",
            f"{agree} of {len(comparison)} claims have the same verdict in both. Written by analysis/replicates.py "
            "(dara.analysis.replicates: how the warm starts needed are computed).", "", markdown(comparison), ""]
    write_text_atomic(args.out / "replicates.md", "\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()
