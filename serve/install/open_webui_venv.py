"""Open WebUI's venv, `.kit/open-webui`: PyPI's open-webui, pinned, with torch's CPU build. The runtime that starts
it is serve/webui/open_webui.py.

open-webui pins about 90 packages (a web server, a vector store, document loaders, sentence-transformers and so
torch): its own venv keeps them out of vLLM's (.kit/vllm) and the light tools' (.venv). torch goes in first, alone,
from TORCH_INDEX_URL (serve/install/torch_cpu.py): left to its requirements, open-webui would bring PyPI's CUDA
build of torch and its NVIDIA libraries. The rest goes in with uv told the user's pip configuration
(serve/install/pip_config.py), as the vLLM venv's does.

    .venv/bin/python -m serve.install.open_webui_venv   # install it ahead (TORCH_INDEX_URL from .env)
"""

from __future__ import annotations

import subprocess
import sys

from serve.config.paths import STATE_DIR
from serve.config.settings import OPEN_WEBUI_VERSION, Settings
from serve.install import torch_cpu
from serve.install.pip_config import progress_line
from serve.install.venv import Venv
from serve.processes.local_server import LOG_DIR
from ui.progress import StepFailed, console, fail, run_logged
from ui.values import SettingsError

REQUIREMENT = f"open-webui=={OPEN_WEBUI_VERSION}"
# open-webui 0.12.4's Requires-Python (its METADATA): >=3.11,<3.13; the kit makes its venvs with `python3`
PYTHONS = ((3, 11), (3, 12))
PROGRAM = "open-webui"  # its console script: `open-webui serve --host --port`
INSTALL_LOG = LOG_DIR / "install-open-webui.log"
TORCH_REPORT = LOG_DIR / "install-open-webui-torch.json"  # pip's --report of the torch step: where torch came from
VENV = Venv(STATE_DIR / "open-webui", "Open WebUI", (torch_cpu.REQUIREMENT, REQUIREMENT), INSTALL_LOG)


def program() -> str:
    return str(VENV.folder / "bin" / PROGRAM)


def python_problem() -> str | None:
    """Why `python3` cannot make this venv (a version open-webui does not run on), or None; nothing to say once the
    venv is installed."""
    if VENV.installed():
        return None
    found = subprocess.run(
        ["python3", "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True, check=False
    ).stdout.split()
    version = tuple(int(part) for part in found) if len(found) == 2 else None
    if version in PYTHONS:
        return None
    names = " or ".join(f"{major}.{minor}" for major, minor in PYTHONS)
    return (
        f"{REQUIREMENT} runs on Python {names} (its Requires-Python), and this machine's python3 is "
        f"{'.'.join(map(str, version)) if version else 'unknown'}, which the kit makes its venvs with: put a "
        f"python3 of {names} first on PATH for up.sh, or run Open WebUI's image instead (labs/webui.md, Docker)"
    )


def install(torch_index_url: str) -> bool:
    """Create the venv and install torch's CPU build, then open-webui, unless the stamp says it is done. True if it
    installed."""
    return VENV.install(lambda: fill(torch_index_url))


def fill(torch_index_url: str) -> None:
    needed_by = f"{REQUIREMENT} (through sentence-transformers)"
    installer = torch_cpu.installer_with_torch(VENV, torch_index_url, TORCH_REPORT, needed_by)
    run_logged(
        f"Installing {REQUIREMENT} and its pinned packages with {installer.name} (a web server, a vector store, "
        "document loaders ...)",
        [*installer.argv, REQUIREMENT],
        INSTALL_LOG,
        env=installer.env,
        detail=progress_line,
    )


def main(argv: list[str] | None = None) -> int:
    if argv if argv is not None else sys.argv[1:]:
        print("usage: python -m serve.install.open_webui_venv (no arguments; TORCH_INDEX_URL from .env)")
        return 2
    try:
        settings = Settings.load()
        done = install(settings.torch_index_url)
    except SettingsError as exc:
        fail(str(exc), code=2)
    except StepFailed as exc:
        fail(str(exc), code=1)
    console.print(f"[green]✓[/green] Open WebUI {'installed' if done else 'already installed'} in {VENV.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
