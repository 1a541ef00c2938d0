"""Which key goes to which engine: the kit's own engines take VLLM_API_KEY, any other OPENAI_API_KEY.

A real OpenAI key exported in the shell must never be sent to the kit's engines, and the kit's key never to
someone else's: the choice is made here, once, for the client, the labs and the benchmarks.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from ui.environment import ENGINE_PORTS


def api_key_for(url: str, env: Mapping[str, str]) -> tuple[str | None, str]:
    """The key to send to `url` and the variable it came from.

    The kit's own engines (loopback or VLLM_HOST, on a port setting that serves one: VLLM_PORT, GPU_PORT, ...) get
    VLLM_API_KEY. Any other URL gets OPENAI_API_KEY, else VLLM_API_KEY. (None, "") when neither is set.
    """
    kit_key, openai_key = env.get("VLLM_API_KEY") or None, env.get("OPENAI_API_KEY") or None
    parts = urlsplit(url)
    kit_hosts = {"127.0.0.1", "localhost", "::1", env.get("VLLM_HOST", "127.0.0.1")}
    kit_ports = {env.get(setting, default) for setting, (default, _) in ENGINE_PORTS.items()}
    try:
        port = str(parts.port or "")
    except ValueError:
        port = ""
    if kit_key and parts.hostname in kit_hosts and port in kit_ports:
        return kit_key, "VLLM_API_KEY"
    if openai_key:
        return openai_key, "OPENAI_API_KEY"
    return (kit_key, "VLLM_API_KEY") if kit_key else (None, "")


def refused_key_hint(url: str, source: str) -> str:
    """One line for a 401: which variable's key was sent, and which variable each kind of engine reads."""
    sent = f"the key from {source}" if source else "no key"
    return (
        f"{url} refused the request ({sent} was sent): the kit's engines take VLLM_API_KEY (the key up.sh "
        "started them with), other engines OPENAI_API_KEY"
    )
