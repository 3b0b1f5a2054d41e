"""Benchmarks: timings reported as ratios against a baseline measured in the same run."""
