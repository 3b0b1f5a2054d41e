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


# One named target per experiment target (`snakemake toolcall`, `snakemake group_size`, ...): its runs, and where it
# trains with another backend than the scale's own, the side-by-side comparison (rule backends).
for _target in EXPERIMENT["targets"]:
    _runs = target_runs(_target)

    rule:
        name:
            _target
        input:
            [run.metrics for run in _runs],
            rules.backends.output if any(run.backend != EXPERIMENT["backend"] for run in _runs) else [],


rule all:
    default_target: True
    input:
        ALL_OUTPUTS,
