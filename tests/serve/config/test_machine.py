"""KIT_CPU_ISA=avx2: the benchmarks' stand-in for a CPU without AVX-512 (serve/config/machine.py).

The kit's `auto` must resolve as on that CPU (its flags, masked), and the native engine must really run that
CPU's kernels: checked in the vLLM venv itself, by which of vLLM's kernel libraries the process maps.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from serve.config import machine
from serve.config.machine import ISA_ENV, Machine
from serve.config.plan import resolve, resolve_dtype
from serve.config.settings import KNOBS, Settings
from serve.config.vllm_flags import Target, vllm_env
from serve.engines.native import ENGINE_PLUGINS, ISA_CAP_ENV, NativeRuntime
from serve.install.vllm_venv import VENV

AVX512_FLAGS = "fpu sse4_2 avx fma f16c avx2 avx512f avx512bw avx512vl avx512_vnni avx512_bf16"


def cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    return path


def test_the_stand_in_hides_avx512_and_amx_and_keeps_avx2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = cpuinfo(tmp_path, AVX512_FLAGS + " amx_tile amx_bf16")
    assert "avx512_bf16" in machine._cpu_flags(path)
    monkeypatch.setenv(ISA_ENV, "avx2")
    flags = machine._cpu_flags(path)
    assert {"avx2", "fma", "f16c"} <= flags
    assert not [flag for flag in flags if flag.startswith(("avx512", "amx"))]


def test_auto_resolves_float32_under_the_stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings.from_env({knob.env: knob.default for knob in KNOBS})
    monkeypatch.setenv(ISA_ENV, "avx2")
    capped = Machine(2, machine._cpu_flags(cpuinfo(tmp_path, AVX512_FLAGS)), 8 << 30)
    assert capped.isa == "AVX2"
    assert resolve_dtype(settings, capped)[0] == "float32"


def test_a_cap_the_kit_cannot_stand_in_for_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ISA_ENV, "sse2")
    with pytest.raises(ValueError, match="KIT_CPU_ISA='sse2' is not a CPU the kit can stand in for: use avx2"):
        machine._cpu_flags(cpuinfo(tmp_path, AVX512_FLAGS))


@pytest.mark.parametrize(
    ("flags", "isa"),
    [
        (AVX512_FLAGS + " amx_tile", "AVX-512 + AMX"),
        (AVX512_FLAGS, "AVX-512 + BF16"),
        ("avx2 avx512f", "AVX-512"),
        ("avx fma avx2", "AVX2"),
        ("neon asimd", "other"),
    ],
)
def test_figures_name_the_isa_that_picks_the_kernels(flags: str, isa: str) -> None:
    assert Machine(2, frozenset(flags.split()), 1).isa == isa


def test_the_native_engine_gets_the_stand_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings.from_env({knob.env: knob.default for knob in KNOBS} | {"QUANTIZATION": "none"})
    monkeypatch.setenv(ISA_ENV, "avx2")
    runtime = NativeRuntime(settings)
    _, env = runtime.command(runtime.resolve())
    assert env.items() >= ISA_CAP_ENV["avx2"].items()
    assert env["PYTHONPATH"].split(":")[:2] == [str(ENGINE_PLUGINS / "isa_avx2"), str(ENGINE_PLUGINS)]


MAPPED_KERNELS = """
import vllm._custom_ops, torch
libs = {line.split("/")[-1] for line in open("/proc/self/maps").read().splitlines() if "vllm/_C" in line}
print(sorted(libs), torch.backends.cpu.get_cpu_capability())
"""


@pytest.mark.skipif(not VENV.python.exists(), reason="needs the native venv (tests/run.sh installs it)")
def test_vllm_under_the_stand_in_loads_its_avx2_kernels() -> None:
    """Real: vLLM's own import picks _C_AVX2 and torch runs AVX2 code, on this machine whatever its ISA."""
    env = {"PATH": "/usr/bin:/bin", **ISA_CAP_ENV["avx2"], "PYTHONPATH": str(ENGINE_PLUGINS / "isa_avx2")}
    result = subprocess.run(
        [str(VENV.python), "-c", MAPPED_KERNELS], capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("]")[0].strip("[") == "'_C_AVX2.abi3.so'"
    assert result.stdout.split()[-1] == "AVX2"


def test_torch_in_the_engine_computes_on_the_threads_the_recap_names() -> None:
    """The engine's environment for nobind with OMP_THREADS=2, given to the vLLM venv's torch: its pool is 2.
    (With MKL_NUM_THREADS=1, the kit's old default, torch.get_num_threads() was 1 whatever OMP_NUM_THREADS said.)"""
    env_file = {knob.env: knob.default for knob in KNOBS} | {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_THREADS": "2"}
    settings = Settings.from_env(env_file)
    resolved = resolve(settings, Machine(2, frozenset(), 8 * 1024**3, 2), None)
    env = {"PATH": "/usr/bin:/bin"} | vllm_env(settings, resolved, Target("m", "127.0.0.1", 8009, (0, 32)))
    probe = "import torch; print(torch.get_num_threads())"
    threads = subprocess.run(
        [str(VENV.python), "-c", probe], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert (resolved.omp_threads, threads.stdout.strip()) == (2, "2"), threads.stderr
    capped = subprocess.run(
        [str(VENV.python), "-c", probe],
        env=env | {"MKL_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert capped.stdout.strip() == "1"  # what the old default did: the reason MKL_NUM_THREADS follows
