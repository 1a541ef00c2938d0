"""A teaching engine built from scratch: paged KV blocks, static vs continuous batching, prefix caching,
preemption, on the real SmolLM2-135M-Instruct weights.

Runs in the native runtime's venv (`.kit/vllm/bin/python -m labs.engine.experiment`), the only place with
torch. Read it in this order: sequence -> block_pool -> scheduler -> model -> model_runner -> engine.
`plot.py` is the exception: it only reads the experiment's JSON, from the light venv.
"""
