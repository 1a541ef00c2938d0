"""The router in front of REPLICAS vLLM engines: PyPI's vllm-router (the vLLM project's Rust router) in its own venv.

Everything lives under `.kit/` (ignored by git):
    .kit/router/                         the venv (vllm-router: serve/install/router_venv.py)
    .kit/run/router-PORT.pid, .kit/logs/router-PORT.log

It listens on VLLM_PORT, where a single engine would: clients, labs and tests do not change. Its policy is
ROUTER_POLICY. The engines stay on loopback-or-VLLM_HOST ports VLLM_PORT+1..+N (serve/engines/replicas.py), and its
Prometheus endpoint (it always opens one) on VLLM_PORT+N+1, on VLLM_HOST too.

Failover, as configured here: a replica whose /health fails HEALTH_FAILURE_THRESHOLD checks in a row, one
every HEALTH_CHECK_INTERVAL_S, is taken out of the rotation; before that, a request whose connection to it is
refused is retried, and after CIRCUIT_FAILURES such failures in a row its circuit opens, so that the retry goes
to another replica whatever the policy prefers; a stream already cut mid-answer is not replayed (the client has
part of an answer: only it can decide to ask again). labs/replicas.md says why and what it costs.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from serve.config.plan import Plan
from serve.config.settings import Settings
from serve.engines.runtime import Started
from serve.install import system
from serve.install.router_venv import ROUTER_VERSION, VENV, install
from serve.processes import run_record
from serve.processes.local_server import LocalRuntime, LocalServer
from serve.processes.run_record import RunRecord

LAUNCHER_MODULE = "vllm_router.launch_router"  # what the `vllm-router` script runs; a module does not pin
# the venv's path in a shebang, so the venv keeps working where .kit is reached through another path
MARKER = "router"  # in its command line: the launcher module, then the title it sets itself (vllm::router)
START_TIMEOUT_S = 120  # it waits for every replica's /health itself, after they are up: seconds
# Taken out of the rotation after this many failed /health checks in a row, one every interval: a dead replica
# gets requests for at most HEALTH_CHECK_INTERVAL_S x HEALTH_FAILURE_THRESHOLD (+ the check's timeout), and
# those the router's retries send elsewhere. Its defaults (60 s x 3) leave a dead replica in for minutes.
HEALTH_CHECK_INTERVAL_S = 2
HEALTH_FAILURE_THRESHOLD = 2
HEALTH_SUCCESS_THRESHOLD = 1  # a restarted replica rejoins at its first healthy answer
# A dead replica fails its check at once (connection refused, or a 5xx from an API server whose engine core is
# gone); the timeout is for a live one that is slow to answer (2 cores, the other replica compiling after a
# restart): its default, 5 s, where 2 s once took both replicas out of the rotation under a soak's load.
HEALTH_CHECK_TIMEOUT_S = 5
# Between a replica's death and its second failed check, the router still picks it. A request whose connection
# it refuses gets a 500 from the router's client, which the router retries: up to RETRY_ATTEMPTS attempts in all,
# 50 ms apart and growing 1.5x (~0.4 s over five; its defaults, said here so that the page and the test rely on
# them). Each retry asks the policy again, among the replicas whose circuit is closed. cache_aware sends a prompt
# back to the replica that holds its prefix, and consistent_hash a session to its replica: every retry would
# go to the dead replica until its circuit opens, after CIRCUIT_FAILURES failed requests in a row. The router's
# default, 10, outlasts the five attempts, so a request with a prefix there failed (18 of 20 succeeded right
# after a kill). At 2, the third attempt goes to a live replica: a dead replica costs no new request, under
# every policy. A live replica rarely fails a request with a 5xx, and one such failure never opens it.
RETRY_ATTEMPTS = 5
RETRY_INITIAL_BACKOFF_MS = 50
CIRCUIT_FAILURES = 2
# An open circuit sends its replica no request for this long, healthy or not; the router's default (60 s) kept
# a replica the supervisor had already restarted out of the rotation for most of a minute.
CIRCUIT_OPEN_S = 10

# The failover settings above, as vllm-router's flags: here and in the Kubernetes manifests (serve/kube).
FAILOVER_ARGS = (
    "--health-check-interval-secs",
    str(HEALTH_CHECK_INTERVAL_S),
    "--health-failure-threshold",
    str(HEALTH_FAILURE_THRESHOLD),
    "--health-success-threshold",
    str(HEALTH_SUCCESS_THRESHOLD),
    "--health-check-timeout-secs",
    str(HEALTH_CHECK_TIMEOUT_S),
    "--retry-max-retries",
    str(RETRY_ATTEMPTS),
    "--retry-initial-backoff-ms",
    str(RETRY_INITIAL_BACKOFF_MS),
    "--cb-failure-threshold",
    str(CIRCUIT_FAILURES),
    "--cb-timeout-duration-secs",
    str(CIRCUIT_OPEN_S),
)


def worker_gauges(metrics_url: str, worker_url: str) -> dict[str, float]:
    """The router's own per-replica gauges for `worker_url`, by name, from its Prometheus endpoint:
    vllm_router_worker_health (1 healthy, 0 not) and vllm_router_cb_state (0 closed, 1 open, 2 half-open; absent
    until that replica's circuit first changes)."""
    text = httpx.get(f"{metrics_url}/metrics", timeout=5.0).text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("worker") == worker_url
    }


class RouterRuntime(LocalRuntime):
    """vllm-router on VLLM_PORT, spreading requests over the replicas' URLs with ROUTER_POLICY."""

    engine = "vllm"
    label = "vllm-router"
    name = "router"

    def __init__(self, settings: Settings, replica_urls: list[str], metrics_port: int) -> None:
        self.settings = settings
        self.port = settings.port
        self.replica_urls = replica_urls
        self.metrics_port = metrics_port
        self.server = LocalServer.of(settings, "vllm-router", "router", MARKER, settings.port, "VLLM_PORT")

    @property
    def served_model(self) -> str:
        return self.settings.model_name

    @property
    def metrics_url(self) -> str:
        return self.settings.url_for(self.metrics_port)

    def system_needs(self) -> list[system.Tool]:
        return []

    def install(self) -> None:
        install()

    def preflight(self) -> None:
        """The replicas' preflight judged the engines; the router needs its two ports free."""
        self.server.ensure_port_free()
        metrics_setting = f"VLLM_PORT (+{self.metrics_port - self.port}, the router's metrics)"
        LocalServer.of(
            self.settings, "router metrics", "router-metrics", MARKER, self.metrics_port, metrics_setting
        ).ensure_port_free()

    def command(self) -> tuple[list[str], dict[str, str]]:
        argv = [
            str(VENV.python),
            "-m",
            LAUNCHER_MODULE,
            "--host",
            self.settings.host,
            "--port",
            str(self.port),
            "--worker-urls",
            *self.replica_urls,
            "--policy",
            self.settings.router_policy,
            "--prometheus-host",
            self.settings.host,
            "--prometheus-port",
            str(self.metrics_port),
            *FAILOVER_ARGS,
            "--worker-startup-check-interval",
            "1",
        ]
        return argv, {**os.environ}

    def start(self, plan: Plan | None = None, *, serve_early: bool = False) -> Started:  # no `auto` plan of its own
        self.server.ensure_port_free()
        install()
        argv, env = self.command()
        pid, waited = self.server.launch(argv, env, START_TIMEOUT_S, patience="it starts in seconds")
        record = RunRecord(
            engine=self.engine,
            runtime=self.name,
            label=self.label,
            port=self.port,
            base_url=self.base_url,
            served_model=self.served_model,
            engine_version=f"vllm-router {ROUTER_VERSION}",
            **run_record.stamp(pid),
            argv=tuple(argv),
            env=env,
            max_model_len=self.settings.max_model_len,
            log_path=str(self.log_path),
            replica_ports=tuple(urlsplit(url).port or 0 for url in self.replica_urls),
            notes={"policy": self.settings.router_policy, "metrics_url": self.metrics_url},
        )
        return Started.recorded(record, waited)

    def recap_rows(self, started: Started | None) -> list[tuple[str, str]]:
        return [
            ("policy", f"{self.settings.router_policy} (ROUTER_POLICY)"),
            ("replicas", ", ".join(self.replica_urls)),
            ("router metrics", f"{self.metrics_url}/metrics"),
        ]
