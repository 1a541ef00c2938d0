"""Waiting for an engine to become healthy, and reading what it said about its KV cache."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from ui.progress import StepFailed, step, tail

POLL_S = 1.0
KV_TOKENS = re.compile(r"(?:CPU|GPU) KV cache size: ([\d,]+) tokens")
KV_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
SLOW_NOT_HUNG = "a start with new settings compiles the model first, a later one loads it: slow, not hung"
# vLLM's API server outlives a dead engine and never answers /health: its log says so, the process does not.
ENGINE_FAILED = re.compile(r"EngineCore failed to start|Engine core initialization failed")
ERROR_LINE = re.compile(r"\b\w*(Error|Exception)\b: \S")
FAILURE_SCAN_LINES = 400
ROOT_CAUSE_LINES = 6


def is_healthy(base_url: str, timeout_s: float = 2.0, path: str = "/health") -> bool:
    try:
        return httpx.get(f"{base_url}{path}", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def last_log_line(log_path: Path) -> str:
    lines = [line for line in tail(log_path, 5).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def wait_healthy(
    base_url: str,
    alive: Callable[[], bool],
    log_path: Path,
    timeout_s: float,
    title: str,
    path: str = "/health",
    patience: str = SLOW_NOT_HUNG,
    progress: Callable[[str], str] | None = None,
) -> float:
    """Poll `path` (/health) until 200; seconds waited. Raise StepFailed if the server dies or time runs out.
    Meanwhile the progress line is `progress(the log so far)` (what the engine is doing), else the log's last line."""
    started = time.monotonic()
    with step(f"{title} ({patience})") as update:
        while not is_healthy(base_url, path=path):
            if not alive():
                raise StepFailed(f"the server exited during start. Last lines of {log_path}:\n{tail(log_path, 40)}")
            failure = engine_failure(tail(log_path, FAILURE_SCAN_LINES))
            if failure is not None:
                raise StepFailed(
                    f"the engine failed to start (its API server would wait forever). {failure}\nFull log: {log_path}"
                )
            if time.monotonic() - started > timeout_s:
                raise StepFailed(
                    f"no healthy answer from {base_url}{path} after {timeout_s:.0f} s "
                    f"(START_TIMEOUT). Last lines of {log_path}:\n{tail(log_path, 40)}"
                )
            if progress is None:
                update(_strip_log_prefix(last_log_line(log_path)))
            else:
                update(progress(log_path.read_text(errors="replace") if log_path.exists() else ""))
            time.sleep(POLL_S)
    return time.monotonic() - started


def engine_failure(log_text: str) -> str | None:
    """None while the log shows no engine failure; else the failure line and the errors that led to it."""
    lines = log_text.splitlines()
    failed = next((line for line in reversed(lines) if ENGINE_FAILED.search(line)), None)
    if failed is None:
        return None
    causes = list(dict.fromkeys(_strip_log_prefix(line).strip() for line in lines if ERROR_LINE.search(line)))
    shown = "\n  ".join(causes[-ROOT_CAUSE_LINES:]) or "(no error line in the log)"
    return f"vLLM: {_strip_log_prefix(failed).strip().rstrip('.')}. Root cause, as logged:\n  {shown}"


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
