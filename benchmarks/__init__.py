"""Benchmarks: scripts that print ratios measured side by side in one run, each run as `python -m benchmarks.<name>`."""
