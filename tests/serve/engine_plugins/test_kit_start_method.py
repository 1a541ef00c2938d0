"""START_METHOD: vLLM's worker starts as a fork of its engine core natively (serve/engine_plugins/kit_start_method.py),
bound to the CPUs vLLM binds a spawned one to, with the kit's other plugins still loaded in it (a killed API server
takes its engine with it: tests/serve/processes/test_supervisor_restarts.py, on the same default)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import psutil

from serve.config.machine import detect
from serve.config.plan import resolve, resolve_start_method
from serve.config.settings import Settings
from serve.processes import run_record
from tests.conftest import ROOT, Server, kit_env

PLUGIN = ROOT / "serve" / "engine_plugins" / "kit_start_method.py"


def plugin():  # type: ignore[no-untyped-def]
    """The plugin as vLLM's processes import it (a module of its folder, not of the kit's packages)."""
    spec = importlib.util.spec_from_file_location("kit_start_method", PLUGIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cpus_vllm_binds_a_worker_to_are_read_from_each_runtime_s_variables() -> None:
    bound_cpus = plugin().bound_cpus
    assert bound_cpus({"OMP_PLACES": "{0,1,2}", "OMP_PROC_BIND": "true"}) == {0, 1, 2}  # no preload
    assert bound_cpus({"KMP_AFFINITY": "granularity=fine,explicit,proclist=[3,5]"}) == {3, 5}  # Intel OpenMP
    assert bound_cpus({"GOMP_CPU_AFFINITY": "0 1"}) == {0, 1}  # GNU OpenMP preloaded
    assert bound_cpus({"OMP_NUM_THREADS": "2"}) == set()  # nobind: vLLM sets none, nothing is bound


def test_auto_forks_natively_and_spawns_in_a_container() -> None:
    settings = Settings.from_env(kit_env())
    assert resolve_start_method(settings) == (
        "fork",
        "auto: the worker starts as a copy of the engine core (measured faster: "
        "labs/measured/start-method-avx512-2026-12-04.json)",
    )
    assert resolve_start_method(settings, container=True)[0] == "spawn"
    assert resolve_start_method(Settings.from_env(kit_env(START_METHOD="spawn")))[0] == "spawn"
    assert resolve(settings, detect(), None).start_method == "fork"


def test_the_session_vllm_forked_its_worker_and_bound_it(vllm_server: Server) -> None:
    record = run_record.live(vllm_server.port)
    assert record is not None and record.env["KIT_START_METHOD"] == "fork"
    assert plugin().FORK_LINE in Path(record.log_path).read_text(errors="replace")
    leader = psutil.Process(record.pid)
    names = {proc.pid: proc.name() for proc in [leader, *leader.children(recursive=True)]}
    (worker,) = [pid for pid, name in names.items() if name.startswith("VLLM::Worker")]
    every_cpu = os.sched_getaffinity(0)
    if record.plan is not None and record.plan.omp_threads_bind == "auto" and len(every_cpu) > 1:
        # vLLM's auto binding: the worker on its cores, one left to the scheduler and API server
        assert os.sched_getaffinity(worker) < every_cpu, (names, os.sched_getaffinity(worker))
