"""Tests of the benchmarks' own modules (bench/): the cost model, the measured report."""
