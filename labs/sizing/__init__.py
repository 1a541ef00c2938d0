"""KV-cache sizing as a command (`python -m labs.sizing`) and the live check against a running vLLM (verify.py).

The computation lives in serve/config/sizing.py, because the preflight that up.sh runs needs it too and data
flows settings -> serve -> labs; import it from there.
"""
