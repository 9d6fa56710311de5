"""Benchmarks, each against a baseline in the same run, and what they share: the cost model
and its prices, the metering, the report `make measured` writes (docs/PERFORMANCE.md)."""
