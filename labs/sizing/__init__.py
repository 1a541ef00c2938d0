"""KV-cache sizing, as a library and a command (`python -m labs.sizing`).

The computation lives in serve/config/sizing.py, because the preflight that up.sh runs needs it too and data
flows settings -> serve -> labs; this package re-exports it and adds the command and the live check.
"""

from serve.config.sizing import (
    GiB,
    KvPool,
    MemoryFit,
    ModelFacts,
    SizingError,
    fit_memory_cap,
    kv_pool,
    kv_space_gib_for_tokens,
    load_model_facts,
    model_facts,
    parse_memory_size,
)

__all__ = [
    "GiB",
    "KvPool",
    "MemoryFit",
    "ModelFacts",
    "SizingError",
    "fit_memory_cap",
    "kv_pool",
    "kv_space_gib_for_tokens",
    "load_model_facts",
    "model_facts",
    "parse_memory_size",
]
