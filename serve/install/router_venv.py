"""The router's venv, `.kit/router`: PyPI's vllm-router (a Rust extension behind a small Python launcher), pinned.
The engine that runs it is serve/engines/router.py."""

from __future__ import annotations

from serve.config.paths import STATE_DIR
from serve.install.venv import Venv
from serve.processes.local_server import LOG_DIR
from ui.progress import run_logged

ROUTER_VERSION = "0.1.17"
REQUIREMENT = f"vllm-router=={ROUTER_VERSION}"
INSTALL_LOG = LOG_DIR / "install-router.log"
VENV = Venv(STATE_DIR / "router", "router", (REQUIREMENT,), INSTALL_LOG)


def install() -> bool:
    """Create the router's venv and install the pinned vllm-router unless the stamp says it is done."""
    return VENV.install(
        lambda: run_logged(
            f"Installing {REQUIREMENT} (a Rust router, one wheel)", [*VENV.pip, "install", REQUIREMENT], INSTALL_LOG
        )
    )
