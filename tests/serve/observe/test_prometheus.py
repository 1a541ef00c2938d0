"""The kit's Prometheus: one scrape configuration generated from the settings and checked by Prometheus's own
`promtool`, the native Prometheus (Debian's package) that up.sh starts and down.sh stops, scraping the harness's
real vLLM while a load runs and llama-server behind the kit's key."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from serve.config.settings import KNOBS, Settings
from serve.engines import runtimes
from serve.install import system
from serve.observe import prometheus, scrape
from serve.processes import process
from tests.conftest import Server, free_port, kit_env, run_script
from tests.support.docs import doc_commands, retarget, run_doc
from tests.support.load import closed_loop
from ui.values import SettingsError

DEFAULTS = {knob.env: knob.default for knob in KNOBS}
PAGE = "labs/observe.md"
LOAD_USERS = 8  # half the default MAX_NUM_SEQS on 2 cores: several run at once
SCRAPE_WAIT_S = 90  # a few scrapes (every 5 s) on a machine whose 2 cores the load keeps busy


def settings(**overrides: str) -> Settings:
    return Settings.from_env({**DEFAULTS, **overrides})


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed (Debian's prometheus package; tests/system-packages.sh installs it)")
    return found


def check_config(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), "check", "config", str(path)], capture_output=True, text=True, timeout=60)


def test_every_engine_of_the_registry_has_a_scrape_job() -> None:
    """A new engine in the registry cannot be left out of the scrape configuration in silence."""
    assert set(scrape.JOB_NAMES) == set(runtimes.ENGINES)


def test_the_jobs_follow_engines_replicas_and_the_runtime() -> None:
    assert scrape.jobs(settings()) == [scrape.Job("vllm", ("127.0.0.1:8009",))]
    every = settings(ENGINES="vllm,llamacpp,llamaserver", REPLICAS="2")
    assert scrape.jobs(every) == [
        scrape.Job("vllm", ("127.0.0.1:8010", "127.0.0.1:8011")),  # each replica, VLLM_PORT+i
        scrape.Job("vllm-router", ("127.0.0.1:8012",)),  # the router's metrics, VLLM_PORT+N+1
        scrape.Job("llamacpp", ("127.0.0.1:11434",)),  # Ollama's port: the Ollama-class engine has metrics too
        scrape.Job("llama-server", ("127.0.0.1:8089",)),
    ]
    assert scrape.jobs(settings(RUNTIME="docker-gpu")) == [scrape.Job("vllm", ("127.0.0.1:8000",))]  # GPU_PORT
    assert scrape.jobs(settings(VLLM_HOST="0.0.0.0", ENGINES="llamacpp")) == [
        scrape.Job("llamacpp", ("127.0.0.1:11434",))
    ]
    assert scrape.jobs(settings(VLLM_HOST="0.0.0.0"))[0].targets == ("127.0.0.1:8009",)  # reached on loopback


@pytest.mark.parametrize(
    "overrides",
    [{}, {"ENGINES": "vllm,llamacpp,llamaserver", "REPLICAS": "2", "VLLM_API_KEY": "sk-lab"}],
    ids=["defaults", "every-engine-with-a-key"],
)
def test_promtool_accepts_the_generated_configuration(overrides: dict[str, str], tmp_path: Path) -> None:
    path = scrape.write(settings(**overrides), tmp_path)
    result = check_config(path)
    assert result.returncode == 0, result.stdout + result.stderr
    written = yaml.safe_load(path.read_text())
    keyed = [job for job in written["scrape_configs"] if "authorization" in job]
    if overrides:
        assert [job["job_name"] for job in keyed] == ["llamacpp", "llama-server"]  # vLLM and the router: open
        key_file = tmp_path / keyed[0]["authorization"]["credentials_file"]
        assert key_file.read_text() == "sk-lab" and key_file.stat().st_mode & 0o777 == 0o600
        assert "sk-lab" not in path.read_text()
    else:
        assert keyed == [] and not (tmp_path / scrape.KEY_FILE_NAME).exists()


def test_promtool_refuses_a_broken_configuration(tmp_path: Path) -> None:
    """The check above can fail: a timeout longer than the interval is refused, as Prometheus itself would."""
    broken = scrape.config(settings())
    broken["global"]["scrape_timeout"] = "30s"
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(broken))
    result = check_config(path)
    assert result.returncode != 0 and "scrape timeout greater than scrape interval" in result.stdout + result.stderr


def test_without_prometheus_up_names_the_package_before_starting_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "apt-get").write_text("#!/bin/sh\n")
    (tmp_path / "apt-get").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))  # apt-get here, no prometheus
    with pytest.raises(system.MissingTools) as caught:
        prometheus.wanted(settings(PROMETHEUS="true"))
    assert "prometheus (PROMETHEUS=true starts the kit's Prometheus with it)" in str(caught.value)
    assert str(caught.value).endswith("apt-get install -y prometheus")
    assert prometheus.wanted(settings()) is None  # PROMETHEUS=false asks for nothing


def test_a_taken_port_is_refused_naming_the_setting_and_a_free_one() -> None:
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus is not installed (tests/system-packages.sh installs it)")
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        with pytest.raises(SettingsError) as caught:
            prometheus.wanted(settings(PROMETHEUS="true", PROMETHEUS_PORT=str(port)))
    assert f"PROMETHEUS_PORT={port} is invalid" in str(caught.value)
    assert "a Prometheus of the system's?" in str(caught.value)


def query(base_url: str, promql: str) -> list[dict]:
    response = httpx.get(f"{base_url}/api/v1/query", params={"query": promql}, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["data"]["result"]


def targets(base_url: str) -> list[dict]:
    return httpx.get(f"{base_url}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]


def wait_for(what: str, found: Callable[[], Any], timeout_s: float = SCRAPE_WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = found()
        if result:
            return result
        time.sleep(1)
    pytest.fail(f"no {what} within {timeout_s:g} s")


def native_commands() -> list[str]:
    """labs/observe.md's native section: up with Prometheus, a query, promtool, down."""
    commands = [command for command in doc_commands(PAGE) if not command.startswith(("docker ", ".venv/"))]
    assert [command.split()[0] for command in commands] == ["PROMETHEUS=true", "curl", "promtool", "bash"], commands
    return commands


@pytest.mark.slow
def test_the_page_starts_prometheus_beside_vllm_and_it_scrapes_vllm_under_load(vllm_server: Server) -> None:
    """labs/observe.md's native commands, verbatim, beside the harness's vLLM: `PROMETHEUS=true bash up.sh` leaves
    the running vLLM as it is and starts Debian's Prometheus on the generated configuration; during a load test
    Prometheus's HTTP API answers `vllm:num_requests_running > 0` for that vLLM; the page's query and promtool pass;
    down.sh stops Prometheus (run here with ENGINES naming no engine of the session's, whose vLLM stays up)."""
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus is not installed (tests/system-packages.sh installs it)")
    up, curl, check, down_command = native_commands()
    port = free_port()
    env = {**vllm_server.env, "PROMETHEUS_PORT": str(port)}
    ports = {8009: vllm_server.port, 9099: port}
    base = f"http://127.0.0.1:{port}"
    try:
        started = run_doc(retarget(up, ports), env, timeout_s=300)
        assert started.returncode == 0, started.stdout + started.stderr
        assert "already up" in started.stdout and "Prometheus is up" in started.stdout, started.stdout
        assert f"scraping    vllm 127.0.0.1:{vllm_server.port} every 5 s" in started.stdout, started.stdout
        wait_for("healthy vLLM target", lambda: [t for t in targets(base) if t["health"] == "up"])

        async def under_load() -> list[dict]:
            async with closed_loop(vllm_server, LOAD_USERS, ["Tell a long story about a cat."], 128, 20) as load:
                deadline = time.monotonic() + SCRAPE_WAIT_S
                while time.monotonic() < deadline:
                    found = await asyncio.to_thread(query, base, "vllm:num_requests_running > 0")
                    if found:
                        return found
                    await asyncio.sleep(1)
                assert not load.failures, [record.to_dict() for record in load.failures]
                return []

        found = asyncio.run(under_load())
        assert found, f"Prometheus never saw vllm:num_requests_running > 0 in {SCRAPE_WAIT_S} s of load"
        (series,) = found
        assert series["metric"]["job"] == "vllm" and series["metric"]["instance"] == f"127.0.0.1:{vllm_server.port}"
        assert 0 < float(series["value"][1]) <= LOAD_USERS

        answer = run_doc(retarget(curl, ports), env, timeout_s=60)
        body = json.loads(answer.stdout)
        assert body["status"] == "success", answer.stdout
        assert [(item["metric"]["job"], item["metric"]["instance"]) for item in body["data"]["result"]] == [
            ("vllm", f"127.0.0.1:{vllm_server.port}")
        ]
        checked = run_doc(check, env, timeout_s=60)
        assert checked.returncode == 0 and "SUCCESS" in checked.stdout, checked.stdout + checked.stderr
    finally:
        keep_vllm = {**env, "ENGINES": "llamaserver", "LLAMA_SERVER_PORT": str(free_port())}
        down = run_doc(down_command, keep_vllm, timeout_s=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "Prometheus (pid" in down.stdout and process.port_is_free("127.0.0.1", port), down.stdout
    assert httpx.get(f"{vllm_server.base_url}/health", timeout=10).status_code == 200


@pytest.mark.server  # a real llama-server, started through up.sh
@pytest.mark.slow
def test_prometheus_scrapes_llama_server_behind_the_key() -> None:
    """llama-server, started with --metrics, guards /metrics with the kit's key: the configuration hands Prometheus
    the key file, and the target is healthy (a wrong key would leave it down with a 401)."""
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus is not installed (tests/system-packages.sh installs it)")
    key, port, llama_port = "sk-observe", free_port(), free_port()
    env = kit_env(
        ENGINES="llamaserver",
        LLAMA_SERVER_PORT=str(llama_port),
        LLAMA_SERVER_SLOTS="1",
        VLLM_PORT=str(free_port()),
        VLLM_API_KEY=key,
        PROMETHEUS="true",
        PROMETHEUS_PORT=str(port),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        up = run_script("up.sh", env, timeout_s=300)
        assert up.returncode == 0, up.stdout + up.stderr
        metrics = f"http://127.0.0.1:{llama_port}/metrics"
        assert httpx.get(metrics, timeout=10).status_code == 401
        keyed = httpx.get(metrics, headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert keyed.status_code == 200 and "llamacpp:requests_processing" in keyed.text, keyed.text[:300]
        healthy = wait_for("healthy llama-server target", lambda: [t for t in targets(base) if t["health"] == "up"])
        assert [t["labels"]["job"] for t in healthy] == ["llama-server"]
        assert query(base, "llamacpp:requests_processing"), "the scraped series is not in Prometheus"
    finally:
        down = run_script("down.sh", env, timeout_s=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert process.port_is_free("127.0.0.1", port) and process.port_is_free("127.0.0.1", llama_port)


def test_the_pages_observe_command_writes_the_configuration_and_says_what_it_scrapes() -> None:
    (command,) = [command for command in doc_commands(PAGE) if command.startswith(".venv/")]
    assert command == ".venv/bin/python -m serve.observe"
    result = run_doc(command, kit_env(ENGINES="vllm,llamacpp"), timeout_s=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "Wrote .kit/observe/prometheus.yml",
        "  job vllm: 127.0.0.1:8009",
        "  job llamacpp: 127.0.0.1:11434",
    ]
    assert yaml.safe_load(scrape.CONFIG_PATH.read_text()) == scrape.config(settings(ENGINES="vllm,llamacpp"))
