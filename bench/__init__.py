"""dlaas benchmarks: run from the repository root, e.g. `python -m bench.api_load`."""
