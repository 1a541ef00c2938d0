"""A vLLM general plugin: inductor builds the model's kernels on KIT_COMPILE_THREADS processes, not one.

vLLM 0.32 sets TORCHINDUCTOR_COMPILE_THREADS=1 at every `import vllm` (vllm/env_override.py; vLLM issues 10480
and 10619: stray compile workers), so a first start builds inductor's C++ kernels one after another on one core
whatever the environment says. torch 2.13 builds them in a SubprocPool started with subprocess.Popen, which the
engine core (a daemonic process) may start (torch/_inductor/async_compile.py, _process_pool_allowed). vLLM loads
every `vllm.general_plugins` entry point in each process it starts (EngineCore.__init__, the workers), before
the model compiles; here those processes take the kit's value (COMPILE_THREADS, serve/config/plan.py and vllm_flags.py).
The API server, which compiles nothing, is left alone.
"""

from __future__ import annotations

import multiprocessing
import os

VARIABLE = "KIT_COMPILE_THREADS"


def register() -> None:
    threads = os.environ.get(VARIABLE, "")
    if multiprocessing.parent_process() is None or not threads.isdigit() or int(threads) < 1:
        return
    import torch._inductor.config as inductor

    inductor.compile_threads = int(threads)
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = threads  # what a process it starts reads at import
