"""COMPILE_THREADS and the kit's vLLM plugin that applies it; the CPU vendor as the kit reads it.

vLLM sets TORCHINDUCTOR_COMPILE_THREADS=1 at every `import vllm` (vllm/env_override.py), so the real test runs the
native venv's vLLM: a spawned child (as vLLM's engine core is) imports vLLM, loads the kit's plugin, and reports
the threads inductor will compile with.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from serve.config import machine
from serve.config.machine import Machine
from serve.config.plan import resolve
from serve.config.settings import Settings
from serve.config.vllm_flags import Target, vllm_env
from serve.engines.native import ENGINE_PLUGINS
from serve.engines.runtime import resolved_rows
from serve.install.vllm_venv import VENV
from ui.values import SettingsError

GiB = 1 << 30
AVX2_AMD = Machine(2, frozenset({"avx2", "fma"}), 8 * GiB, 2, vendor="AuthenticAMD")
AVX512_AMD = Machine(2, frozenset({"avx2", "avx512f", "avx512_bf16"}), 8 * GiB, 2, vendor="AuthenticAMD")
AVX512_INTEL = Machine(2, frozenset({"avx2", "avx512f", "avx512_bf16"}), 8 * GiB, 2, vendor="GenuineIntel")

# A spawned child, as vLLM starts its engine core: `import vllm` forces 1, then vLLM loads its general plugins.
CHILD = """
import multiprocessing as mp

def child(queue):
    import vllm  # vllm/env_override.py: TORCHINDUCTOR_COMPILE_THREADS=1
    import torch._inductor.config as inductor
    before = inductor.compile_threads
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    queue.put((before, inductor.compile_threads))

if __name__ == "__main__":
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,), daemon=True)  # vLLM's engine core is daemonic too
    process.start()
    print(*queue.get())
    process.join()
"""


def test_auto_compiles_on_every_core_this_process_may_use() -> None:
    resolved = resolve(Settings.from_env({}), AVX2_AMD, None)
    assert resolved.compile_threads == 2 and "2 cores" in resolved.compile_threads_reason
    native = Target("m", "127.0.0.1", 8009, (0, 32))
    assert vllm_env(Settings.from_env({}), resolved, native)["KIT_COMPILE_THREADS"] == "2"
    assert "KIT_COMPILE_THREADS" not in vllm_env(
        Settings.from_env({}), resolved, Target("m", "h", 1, (0, 32), gpu=True)
    )
    pinned = resolve(Settings.from_env({"COMPILE_THREADS": "1"}), AVX2_AMD, None)
    assert (pinned.compile_threads, pinned.compile_threads_reason) == (1, "set in COMPILE_THREADS")
    assert (
        "compile",
        "2 processes (auto: the 2 cores this process may use (the compiled engine serves nothing while it compiles))",
    ) in (resolved_rows(resolved))
    assert not [row for row in resolved_rows(pinned) if row[0] == "compile"]  # vLLM's own: nothing to say


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_bad_value_names_the_fix(value: str) -> None:
    with pytest.raises(SettingsError, match=f"COMPILE_THREADS={value!r} is invalid"):
        Settings.from_env({"COMPILE_THREADS": value})


@pytest.mark.skipif(not VENV.python.exists(), reason="needs the native venv (tests/run.sh installs it)")
@pytest.mark.parametrize(("threads", "expected"), [("2", "1 2"), ("", "1 1")])
def test_the_plugin_gives_inductor_the_kits_threads_in_vllms_engine_processes(
    tmp_path: Path, threads: str, expected: str
) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ENGINE_PLUGINS), "KIT_COMPILE_THREADS": threads}
    result = subprocess.run(
        [str(VENV.python), str(script)], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[-2] == expected, result.stdout


def test_the_vendor_is_read_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nflags\t\t: fpu avx2\n")
    assert machine._cpu_vendor(cpuinfo) == "AuthenticAMD"
    assert machine._cpu_vendor(tmp_path / "absent") == ""
