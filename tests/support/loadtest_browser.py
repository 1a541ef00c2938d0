"""Open a page in Debian's real headless chromium and report what a reader would see.

Driven through the DevTools protocol over a pipe (--remote-debugging-pipe: JSON messages ending in NUL on
fds 3 and 4), so the checks come from the browser itself: every image's natural size after load, and
every console error, uncaught exception or failed load the page produced.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--remote-debugging-pipe",
)
LOAD_TIMEOUT_S = 60.0
IMAGES_JS = (
    "JSON.stringify({title: document.title, text: document.body.innerText, "
    "images: [...document.images].map(i => ({complete: i.complete, width: i.naturalWidth})), "
    "sections: [...document.querySelectorAll('section')].map(s => ({id: s.id, "
    "heading: s.querySelector('h2') ? s.querySelector('h2').innerText : '', "
    "images: [...s.querySelectorAll('img')].map(i => ({complete: i.complete, width: i.naturalWidth}))}))})"
)


@dataclass
class PageCheck:
    title: str
    text: str
    images: list[dict[str, Any]]
    errors: list[str] = field(default_factory=list)
    sections: list[dict[str, Any]] = field(default_factory=list)  # each <section>: its id, heading and images

    @property
    def broken_images(self) -> list[dict[str, Any]]:
        return [image for image in self.images if not image["complete"] or image["width"] <= 0]


class Browser:
    def __init__(self, profile_dir: str) -> None:
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()

        def wire_fds_3_and_4() -> None:  # in the child: chromium reads commands on fd 3, writes on fd 4
            read_end, write_end = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_read, from_browser_write))
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self.process = subprocess.Popen(
            [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile_dir}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            preexec_fn=wire_fds_3_and_4,
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read(LOAD_TIMEOUT_S)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout_s: float = LOAD_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(event.get("method") == method for event in self.events):
            self.events.append(self._read(deadline - time.monotonic()))

    def _read(self, timeout_s: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], max(0.0, timeout_s))
            if not ready:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.send("Browser.close")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        os.close(self._to_browser)
        os.close(self._from_browser)


def errors_in(events: list[dict[str, Any]]) -> list[str]:
    errors = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            errors.append(
                "console: " + " ".join(str(arg.get("value", arg.get("description"))) for arg in params.get("args", []))
            )
        elif method == "Runtime.exceptionThrown":
            errors.append("exception: " + json.dumps(params.get("exceptionDetails", {}))[:300])
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            errors.append("log: " + params["entry"].get("text", ""))
    return errors


def check_page(path: Path) -> PageCheck:
    """Load `path` in headless chromium; return its title, text, images' state and every error it logged."""
    with tempfile.TemporaryDirectory() as profile_dir:
        browser = Browser(profile_dir)
        try:
            target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                browser.send(f"{domain}.enable", session=session)
            browser.send("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
            browser.wait_for("Page.loadEventFired")
            result = browser.send("Runtime.evaluate", {"expression": IMAGES_JS, "returnByValue": True}, session=session)
            page = json.loads(result["result"]["value"])
            return PageCheck(
                page["title"], page["text"], page["images"], errors_in(browser.events), page.get("sections", [])
            )
        finally:
            browser.close()
