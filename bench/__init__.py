"""The benchmarks (bench/README.md) and the diagnostics (bench/diag/README.md).

Run from the repository root as modules, e.g. `.venv/bin/python -m bench.bench_accuracy --suite mmlu`; what the
scripts share is in `bench/common.py`.
"""
