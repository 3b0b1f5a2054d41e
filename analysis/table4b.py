"""Table 4b: instruct vs thinking models (Qwen3-4B-Instruct-2507 vs -Thinking-2507, math, step 100).

This needs two base models of one family that differ in how long they think. The tiny study trains one
warm-start policy per task and has no such pair, so at tiny and smoke scale the table says so instead of
inventing a stand-in; at paper scale it needs runs of both models, which the experiment files do not
define yet. Output: results/<scale>/tables/table4b.md (the paper's numbers are in
analysis/reference/math_macro.csv).
"""

import pandas as pd

from dara.analysis.cli import parse_inputs
from dara.io import write_text_atomic


def main(argv=None):
    inputs = parse_inputs(__doc__.splitlines()[0], argv)
    paper = pd.read_csv(inputs.reference_dir / "math_macro.csv")
    paper = paper[paper["model"].isin(["Qwen3-4B-Instruct", "Qwen3-4B-Thinking"]) & (paper["step"] == 100)]
    lines = [f"# Table 4b ({inputs.scale} scale): instruct vs thinking", "",
             "Not reproduced: no run of this study has an instruct/thinking model pair. The tiny scale trains a single "
             "warm-start policy per task, and a second policy trained to pad its answers would be an invented "
             "stand-in, not the paper's comparison.", "",
             "The paper's numbers, for reference (macro %, step 100):", "",
             paper[["model", "method", "accuracy", "exceed"]].to_markdown(index=False), ""]
    write_text_atomic(inputs.tables / "table4b.md", "\n".join(lines))


if __name__ == "__main__":
    main()
