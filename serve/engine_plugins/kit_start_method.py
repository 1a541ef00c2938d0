"""A vLLM general plugin: vLLM's engine core starts its worker as KIT_START_METHOD says (the kit's START_METHOD).

vLLM 0.32's CPU platform sets VLLM_WORKER_MULTIPROC_METHOD=spawn whatever the environment says
(vllm/platforms/cpu.py, check_and_update_config): the worker, the process that runs the model, starts as a fresh
interpreter that imports torch and vLLM again, seconds of CPU before it loads a weight. With `fork` it starts as a
copy of the engine core, both already imported. The engine core has run no OpenMP region when it starts the worker
(the model runs in the worker), so no thread pool is copied half-alive. vLLM loads the kit's plugins in the engine
core (EngineCore.__init__) before it starts the worker: this one asks for a fork there. The API server still spawns
the engine core: forking that too was measured to cost one user's decode
(labs/measured/start-method-avx512-2026-12-04.json).

What a forked worker must be given that a fresh one takes by itself:
- vLLM binds the worker's OpenMP threads through variables a new OpenMP runtime reads as it starts (OMP_PLACES,
  KMP_AFFINITY or GOMP_CPU_AFFINITY, set around the worker's start: vllm/utils/ompmultiprocessing.py). A forked
  worker keeps the engine core's runtime, which read none of them: it is bound to those CPUs here instead, and the
  threads it starts later inherit them.
- It inherits vLLM's "plugins loaded" flag, and vLLM would skip the kit's plugins in it (kit_parent_watch: the
  worker dies with its engine core; kit_compile_threads): the flag is cleared, so the worker loads them as a spawned
  one does.
Standard library only at import.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import sys

VARIABLE = "KIT_START_METHOD"
VLLM_VARIABLE = "VLLM_WORKER_MULTIPROC_METHOD"
KMP_PROCLIST = re.compile(r"proclist=\[([^\]]*)\]")
FORK_LINE = "kit: vLLM's worker starts as a fork of its engine core (START_METHOD), bound as vLLM binds it"
_asked = False


def bound_cpus(environ: os._Environ[str] | dict[str, str]) -> set[int]:
    """The CPUs vLLM binds a worker to, as the variables it set for that worker's start say (none: not bound)."""
    kmp = KMP_PROCLIST.search(environ.get("KMP_AFFINITY", ""))
    listed = kmp.group(1) if kmp else environ.get("OMP_PLACES") or environ.get("GOMP_CPU_AFFINITY") or ""
    return {int(cpu) for cpu in re.findall(r"\d+", listed)}


def register() -> None:
    """In the engine core (a process vLLM started; the API server has no multiprocessing parent): fork the worker."""
    global _asked
    if os.environ.get(VARIABLE) != "fork" or _asked or multiprocessing.parent_process() is None:
        return
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":  # the uni executor: the model runs here, no worker
        return
    _asked = True
    from vllm import plugins

    def in_the_forked_worker() -> None:
        plugins.plugins_loaded = False
        cpus = bound_cpus(os.environ)
        if cpus:
            os.sched_setaffinity(0, cpus)

    os.environ[VLLM_VARIABLE] = "fork"
    os.register_at_fork(after_in_child=in_the_forked_worker)
    print(FORK_LINE, file=sys.stderr, flush=True)  # the engine's log says how its worker starts
