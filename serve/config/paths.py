"""Where the kit keeps things: the checkout, its settings files, what it installs, and what outlives a clone."""

from __future__ import annotations

import os
from pathlib import Path

from ui.environment import ROOT

STATE_DIR = ROOT / ".kit"  # everything installed or generated for this checkout, ignored by git
RUN_DIR = STATE_DIR / "run"  # what runs now: pidfiles, run records, the supervisors' events, port locks
# Built artifacts worth keeping across clones of the kit on one machine (like pip's own cache);
# a bare machine simply builds what is missing.
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm-lab-kit"
