"""The GPU track's wiring, offline: no GPU and no Docker engine are needed to check that RUNTIME=docker-gpu is served on
GPU_PORT by every part of the kit that aims at vLLM (compose's service, up's lock, the labs' URL, the key sent there).
"""

from __future__ import annotations

import socket

import pytest
import yaml

from client.keys import api_key_for
from labs.compare.workload import targets
from serve.config.paths import ROOT
from serve.config.settings import Settings
from serve.engines import runtimes
from serve.engines.compose import Compose
from serve.engines.docker import CPU, GPU, TRACKS, DockerRuntime, Track
from ui.environment import ENV_EXAMPLE, load_env
from ui.values import SettingsError

VLLM_PORT, GPU_PORT = 8101, 8124
KEY = "kit-test-key"
COMPOSE_V2 = Compose(("docker", "compose"), "2.29.7")


@pytest.fixture
def gpu_env(monkeypatch: pytest.MonkeyPatch) -> Settings:
    """RUNTIME=docker-gpu with a key, VLLM_PORT and GPU_PORT apart, as a user's shell would export them."""
    monkeypatch.setenv("KIT_ENV_FILE", str(ENV_EXAMPLE))
    for name, value in {
        "RUNTIME": "docker-gpu",
        "ENGINES": "vllm",
        "VLLM_PORT": str(VLLM_PORT),
        "GPU_PORT": str(GPU_PORT),
        "VLLM_API_KEY": KEY,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return Settings.load()


def test_the_gpu_runtime_is_compose_s_gpu_service_on_gpu_port(gpu_env: Settings) -> None:
    runtime = DockerRuntime(gpu_env, TRACKS[gpu_env.runtime], COMPOSE_V2)
    assert runtime.track is GPU and runtime.name == "docker-gpu"
    assert runtime.port == GPU_PORT and runtime.base_url == f"http://127.0.0.1:{GPU_PORT}"
    argv = runtime.compose("up", "-d", "--no-build", GPU.service)
    assert argv[argv.index("--profile") + 1] == "gpu" and argv[-1] == "vllm-gpu"
    assert runtime.log_path.name == f"docker-vllm-gpu-{GPU_PORT}.log"


@pytest.mark.parametrize("track", [CPU, GPU], ids=lambda track: track.runtime)
def test_compose_publishes_each_service_on_its_track_s_port_setting(track: Track) -> None:
    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    published = services[track.service]["ports"][0]
    assert f"${{{track.port_setting}:-" in published, published


def test_up_and_down_lock_gpu_port_and_the_labs_aim_there_with_the_kit_s_key(gpu_env: Settings) -> None:
    assert runtimes.ports(gpu_env) == [GPU_PORT]  # the lock up.sh and down.sh take
    assert runtimes.ENGINES["vllm"].base_url(gpu_env) == f"http://127.0.0.1:{GPU_PORT}"
    [target] = targets(gpu_env)  # labs.compare and labs.contract
    assert target.base_url == f"http://127.0.0.1:{GPU_PORT}/v1"
    assert target.url_source == "GPU_PORT"  # what an unreachable engine's message tells the user to check
    assert (target.api_key, target.key_source) == (KEY, "VLLM_API_KEY")
    assert api_key_for(f"http://127.0.0.1:{GPU_PORT}/v1", load_env()) == (KEY, "VLLM_API_KEY")


def test_the_other_runtimes_keep_vllm_on_vllm_port(gpu_env: Settings) -> None:
    for runtime in ("native", "docker", "auto"):
        settings = Settings.from_env({**load_env(), "RUNTIME": runtime})
        assert runtimes.ports(settings) == [VLLM_PORT], runtime
        assert runtimes.vllm_port_setting(settings) == "VLLM_PORT"


def test_a_gpu_port_in_use_is_refused_naming_gpu_port(gpu_env: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setenv("GPU_PORT", str(taken.getsockname()[1]))
        runtime = DockerRuntime(Settings.load(), GPU, COMPOSE_V2)
        with pytest.raises(SettingsError, match=f"^GPU_PORT={runtime.port} is invalid: port {runtime.port}"):
            runtime.check()
