"""Waiting for an engine to become healthy, and reading what it said about its KV cache."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from serve.progress import StepFailed, step, tail

POLL_S = 1.0
KV_TOKENS = re.compile(r"(?:CPU|GPU) KV cache size: ([\d,]+) tokens")
KV_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
SLOW_NOT_HUNG = "the first start compiles the model for a few minutes: slow, not hung"


def is_healthy(base_url: str, timeout_s: float = 2.0, path: str = "/health") -> bool:
    try:
        return httpx.get(f"{base_url}{path}", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def last_log_line(log_path: Path) -> str:
    lines = [line for line in tail(log_path, 5).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def wait_healthy(base_url: str, alive: Callable[[], bool], log_path: Path, timeout_s: float,
                 title: str, path: str = "/health", patience: str = SLOW_NOT_HUNG) -> float:
    """Poll `path` (/health) until 200; seconds waited. Raise StepFailed if the server dies or time runs out."""
    started = time.monotonic()
    with step(f"{title} ({patience})") as update:
        while not is_healthy(base_url, path=path):
            if not alive():
                raise StepFailed(f"the server exited during start. Last lines of {log_path}:\n"
                                 f"{tail(log_path, 40)}")
            if time.monotonic() - started > timeout_s:
                raise StepFailed(f"no healthy answer from {base_url}{path} after {timeout_s:.0f} s "
                                 f"(START_TIMEOUT). Last lines of {log_path}:\n{tail(log_path, 40)}")
            update(_strip_log_prefix(last_log_line(log_path)))
            time.sleep(POLL_S)
    return time.monotonic() - started


def wait_for_kv_line(log_path: Path, timeout_s: float) -> bool:
    """Wait until the log holds vLLM's KV-cache lines (a log follower may lag behind /health); True if it does."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        if kv_cache_report(text) is not None:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def _strip_log_prefix(line: str) -> str:
    """'(EngineCore pid=1) INFO 11-29 09:14:48 [core.py:133] text' -> 'text'."""
    return line.split("] ", 1)[-1] if "] " in line else line


@dataclass(frozen=True, slots=True)
class KvCacheReport:
    """What vLLM logged at start: the pool size in tokens and how many max-length requests fit."""

    tokens: int
    max_model_len: int
    max_concurrency: float


def kv_cache_report(log_text: str) -> KvCacheReport | None:
    tokens = KV_TOKENS.findall(log_text)
    concurrency = KV_CONCURRENCY.findall(log_text)
    if not tokens or not concurrency:
        return None
    length, factor = concurrency[-1]
    return KvCacheReport(int(tokens[-1].replace(",", "")), int(length.replace(",", "")), float(factor))
