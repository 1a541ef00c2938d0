"""Polling a condition in a test, with a failure that says what never happened."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

POLL_S = 0.5


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Seconds until `check()` held; the test fails naming `what` after `timeout_s`."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout_s:
            pytest.fail(f"waited {timeout_s:g} s for {what}")
        time.sleep(POLL_S)
    return time.monotonic() - started
