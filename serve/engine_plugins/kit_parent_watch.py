"""A vLLM general plugin: the engine core and its workers die with the process that started them.

vLLM 0.32 gives its workers a death pipe to the engine core (v1/executor/multiproc_executor.py), but nothing
ties the engine core to its API server: SIGKILL the API server (the OOM killer, a crash) and `VLLM::EngineCore`
with its `VLLM::Worker` live on with PPID 1, holding the weights and the KV cache (3 GB seen). vLLM loads
every `vllm.general_plugins` entry point in each process it starts (EngineCore.__init__, the workers), so
here each of those children asks Linux for SIGKILL when its parent exits (prctl PR_SET_PDEATHSIG).

The API server itself (no multiprocessing parent: its parent is the kit's supervisor) is left alone. The
entry point is declared by the kit_engine_plugins-1.0.dist-info folder beside this file: importlib.metadata
finds it on PYTHONPATH, so nothing is installed into vLLM's venv. Standard library only.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def register() -> None:
    parent = multiprocessing.parent_process()
    if parent is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return
    if os.getppid() != parent.pid:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGKILL)
