"""Held-out evaluation: BFCL-v4 (scored by bfcl-eval in its own environment), math benchmarks and the
tiny-scale held-out sets. Submodules are imported explicitly; this package imports nothing heavy so the
bfcl environment (no torch) can import `dara.evaluation.bfcl_*`."""
