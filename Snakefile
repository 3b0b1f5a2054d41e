# The DARA study as one workflow. Scale: `--config scale=smoke|tiny|paper` (default tiny).
# Path helpers and the experiment matrix live in workflow/rules/common.smk; each stage in its own file.
from snakemake.utils import min_version

min_version("9.0")


configfile: "experiments/default.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/paper.smk"


rule all:
    default_target: True
    input:
        ALL_OUTPUTS,
