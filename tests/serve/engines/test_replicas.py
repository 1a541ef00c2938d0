"""REPLICAS=2: two real vLLM engines behind vllm-router on loopback, judged by each replica's own /metrics.

One module-scoped setup (`bash up.sh` with REPLICAS=2); switching ROUTER_POLICY restarts only the router
(a second), never an engine (minutes). Which replica served a request is read from the replicas' counters
(vllm:request_success_total) before and after it: the router does not say.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from labs.doctor import replicas as doctor_replicas
from serve.config.machine import Machine
from serve.config.settings import ROUTER_POLICIES, Settings
from serve.config.sizing import GiB
from serve.engines import replicas, runtimes
from serve.engines.native import NativeRuntime
from serve.engines.router import RouterRuntime, worker_gauges
from serve.processes import process, run_record
from serve.processes.local_server import RUN_DIR
from serve.processes.metrics import MetricsSnapshot
from tests.conftest import MODEL, kit_env, run_bounded, run_script
from tests.support.waiting import wait_until
from ui.values import SettingsError

KEY = "replicas-test-key"
SUCCESS = "vllm:request_success_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
HEADERS = {"Authorization": f"Bearer {KEY}"}
SYSTEM_PROMPT = " ".join(f"Rule {n}: answer briefly, politely and in plain English." for n in range(1, 61))


def settings_for(**env: str) -> Settings:
    return Settings.from_env(kit_env(**env))


# --- the plan: ports, shares, refusals (no server) ------------------------------------------------------


def test_ports_follow_one_rule_and_the_router_takes_vllm_port() -> None:
    settings = settings_for(VLLM_PORT="8100", REPLICAS="3", RUNTIME="native")
    assert replicas.replica_ports(settings) == [8101, 8102, 8103]
    assert replicas.metrics_port(settings) == 8104
    started = runtimes.vllm_runtimes(dataclasses.replace(settings, replicas=2))
    assert [runtime.port for runtime in started] == [8101, 8102, 8100]
    assert isinstance(started[-1], RouterRuntime) and started[-1].base_url == settings.base_url
    router_argv, _ = started[-1].command()
    assert router_argv[router_argv.index("--prometheus-port") + 1] == "8103"
    assert router_argv[router_argv.index("--prometheus-host") + 1] == "127.0.0.1"
    assert router_argv[router_argv.index("--policy") + 1] == "cache_aware"


def test_each_replica_binds_its_own_cores() -> None:
    settings = settings_for(REPLICAS="2")
    assert [share.bind for share in replicas.shares(settings, [0, 1])] == ["0", "1"]
    assert [share.bind for share in replicas.shares(settings, [0, 1, 2, 3, 4])] == ["0-2", "3-4"]
    assert replicas.cpu_list((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    share = replicas.shares(settings, [0, 1])[1]
    resolved = NativeRuntime(settings, share, 8011).resolve()
    assert (resolved.omp_threads_bind, resolved.omp_threads) == ("1", 1)


def test_more_replicas_than_cores_is_refused_with_the_numbers() -> None:
    with pytest.raises(SettingsError, match=r"REPLICAS=3 is too many .* 2 usable CPUs .* set REPLICAS=2"):
        replicas.shares(settings_for(REPLICAS="3"), [0, 1])


def test_more_replicas_than_memory_is_refused_with_the_numbers() -> None:
    small = Machine(usable_cores=8, cpu_flags=frozenset(), memory_available_bytes=7 * GiB)
    with pytest.raises(
        SettingsError,
        match=r"REPLICAS=4 .* memory: each replica needs 3.00 GiB .* 12.00 GiB "
        r"in all, and 7.00 GiB is available; set REPLICAS=2",
    ):
        replicas.check_memory(settings_for(REPLICAS="4"), 3 * GiB, small)


def test_replicas_run_natively_only() -> None:
    with pytest.raises(SettingsError, match="REPLICAS=2 is invalid with RUNTIME=docker"):
        runtimes.vllm_runtimes(settings_for(REPLICAS="2", RUNTIME="docker"))


# --- the real thing -------------------------------------------------------------------------------------


@dataclass
class Cluster:
    env: dict[str, str]
    settings: Settings

    @property
    def engines(self) -> list[NativeRuntime]:
        return [runtime for runtime in runtimes.vllm_runtimes(self.settings) if isinstance(runtime, NativeRuntime)]

    @property
    def replica_urls(self) -> list[str]:
        return [engine.base_url for engine in self.engines]

    @property
    def router_url(self) -> str:
        return self.settings.base_url

    def use_policy(self, policy: str) -> None:
        """Restart only the router, with `policy`."""
        router = runtimes.vllm_runtimes(dataclasses.replace(self.settings, router_policy=policy))[-1]
        router.stop(quiet=True)
        router.start()
        wait_until(lambda: all_workers_routable(self.router_url), 30, "the router to route to both replicas")

    def counters(self, name: str) -> list[float]:
        return [counter(url, name) for url in self.replica_urls]


def counter(base_url: str, name: str) -> float:
    """A replica's own counter; for SUCCESS only the answers it finished (not aborts or errors)."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and sample.labels.get("finished_reason", "stop") in ("stop", "length")
    )


def router_health(cluster: Cluster, worker_url: str) -> float | None:
    """vllm_router_worker_health for one replica, from the router's own Prometheus endpoint."""
    metrics_url = cluster.settings.url_for(replicas.metrics_port(cluster.settings))
    return worker_gauges(metrics_url, worker_url).get("vllm_router_worker_health")


def all_workers_routable(router_url: str) -> bool:
    try:
        return httpx.get(f"{router_url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def chat(
    url: str, content: str, headers: dict[str, str] | None = None, system: str | None = None, max_tokens: int = 4
) -> httpx.Response:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
    return httpx.post(
        f"{url}/v1/chat/completions",
        timeout=120,
        headers={**HEADERS, **(headers or {})},
        json={"model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0},
    )


def served_by(cluster: Cluster, send) -> int:
    """Send one request; the index of the replica whose own success counter grew by it."""
    before = cluster.counters(SUCCESS)
    response = send()
    assert response.status_code == 200, response.text
    grown = [i for i, (a, b) in enumerate(zip(before, cluster.counters(SUCCESS), strict=True)) if b > a]
    assert len(grown) == 1, (before, grown)
    return grown[0]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    port = process.free_port_run("127.0.0.1", 4)
    env = kit_env(
        VLLM_PORT=str(port),
        RUNTIME="native",
        REPLICAS="2",
        ROUTER_POLICY="round_robin",
        ENFORCE_EAGER="true",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_API_KEY=KEY,
    )
    try:  # an up.sh stopped at its timeout leaves the replicas it started: down.sh stops them too
        result = run_script("up.sh", env, timeout_s=900)
        assert result.returncode == 0, result.stdout + result.stderr
        for line in ("vLLM replica 1/2", "vLLM replica 2/2", "round_robin (ROUTER_POLICY)"):
            assert line in result.stdout, result.stdout
        yield Cluster(env, Settings.from_env(env))
    finally:
        down = run_script("down.sh", env, timeout_s=300)
        assert down.returncode == 0, down.stdout + down.stderr
    for offset in range(4):
        assert process.port_is_free("127.0.0.1", port + offset), port + offset
    leftovers = [
        path.name
        for path in RUN_DIR.glob("*.pid")
        if path.name in (f"router-{port}.pid", f"vllm-{port + 1}.pid", f"vllm-{port + 2}.pid")
    ]
    assert leftovers == [] and not any(run_record.record_path(port + offset).exists() for offset in range(3))


@pytest.mark.server
@pytest.mark.slow
def test_status_shows_each_replica_and_the_router(cluster: Cluster) -> None:
    status = run_bounded([sys.executable, "-m", "serve", "status"], cluster.env, 60)
    assert status.returncode == 0, status.stdout + status.stderr
    rows = {line.split("   ")[0]: line for line in status.stdout.splitlines()}  # one line per engine, by its label
    for label in ("vLLM replica 1/2", "vLLM replica 2/2", "vllm-router"):
        assert label in rows and MODEL in rows[label], status.stdout
    # the replicas require the key; the router passes the client's on
    assert chat(cluster.router_url, "Hi", headers={"Authorization": "Bearer wrong"}).status_code == 401


@pytest.mark.server
@pytest.mark.slow
def test_round_robin_spreads_requests_evenly(cluster: Cluster) -> None:
    before = cluster.counters(SUCCESS)
    for n in range(8):
        assert chat(cluster.router_url, f"Count to {n}.").status_code == 200
    grown = [b - a for a, b in zip(before, cluster.counters(SUCCESS), strict=True)]
    assert grown == [4, 4], grown


@pytest.mark.server
@pytest.mark.slow
def test_the_doctor_reads_every_replica_and_the_router(cluster: Cluster) -> None:
    doctor = run_bounded([sys.executable, "-m", "labs.doctor", "--samples", "1"], cluster.env, 120)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    for url in cluster.replica_urls:
        assert url in doctor.stdout, doctor.stdout
    assert "sum" in doctor.stdout and "vllm-router over 2 replicas" in doctor.stdout, doctor.stdout
    assert f"{cluster.settings.url_for(replicas.metrics_port(cluster.settings))}/metrics answers" in doctor.stdout
    assert "balance: no replica" in doctor.stdout, doctor.stdout  # round robin left them 4 and 4 (and more)


def test_an_imbalance_is_named_with_the_policy() -> None:
    def snapshot(running: float, done: float) -> MetricsSnapshot:
        return MetricsSnapshot(0.0, running, 0.0, 0.1, 0.0, requests_done_total=done)

    named = [("http://a", snapshot(0, 20)), ("http://b", snapshot(0, 3))]
    line = doctor_replicas.imbalance(named, "cache_aware")
    assert line is not None and line.startswith("imbalance: http://a has finished 20 requests, http://b 3")
    assert "cache_aware keeps shared prefixes" in line
    assert (
        doctor_replicas.imbalance([("http://a", snapshot(5, 9)), ("http://b", snapshot(4, 8))], "round_robin") is None
    )


@pytest.mark.server
@pytest.mark.slow
def test_consistent_hash_keeps_each_session_on_one_replica(cluster: Cluster) -> None:
    cluster.use_policy("consistent_hash")
    placed: dict[str, set[int]] = {}
    for turn in range(3):
        for session in ("alice", "bob", "carol", "dave"):
            replica = served_by(
                cluster, partial(chat, cluster.router_url, f"Turn {turn}.", headers={"X-Session-ID": session})
            )
            placed.setdefault(session, set()).add(replica)
    assert all(len(where) == 1 for where in placed.values()), placed


@pytest.mark.server
@pytest.mark.slow
def test_cache_aware_keeps_a_shared_prompt_on_one_replica_and_its_cache_hits(cluster: Cluster) -> None:
    cluster.use_policy("cache_aware")
    hits_before = cluster.counters(PREFIX_HITS)
    where = {
        served_by(cluster, partial(chat, cluster.router_url, question, system=SYSTEM_PROMPT))
        for question in ("What is 2+2?", "Name a colour.", "Say hello.", "Name a fruit.", "Pick a number.")
    }
    assert len(where) == 1, where
    chosen = where.pop()
    hits = [b - a for a, b in zip(hits_before, cluster.counters(PREFIX_HITS), strict=True)]
    assert hits[chosen] > 0 and hits[1 - chosen] == 0, hits


def complete(url: str, prompt: str, session: str) -> httpx.Response:
    """One short non-streamed /v1/completions request, its session named for consistent_hash."""
    return httpx.post(
        f"{url}/v1/completions",
        timeout=120,
        headers={**HEADERS, "X-Session-ID": session},
        json={"model": MODEL, "prompt": prompt, "max_tokens": 4, "temperature": 0},
    )


def finished(completion: dict) -> bool:
    """A /v1/completions answer the engine finished: stopped or at max_tokens, with its tokens counted."""
    return completion["choices"][0]["finish_reason"] in ("stop", "length") and (
        completion["usage"]["completion_tokens"] >= 1
    )


@contextmanager
def a_router_for_each_policy(cluster: Cluster) -> Iterator[dict[str, str]]:
    """One more vllm-router per policy, each on ports of its own, in front of the cluster's two replicas: the
    kit's RouterRuntime (FAILOVER_ARGS and all), so one kill is met by every policy at the same moment."""
    routers = []
    try:
        for policy in ROUTER_POLICIES:
            port = process.free_port_run("127.0.0.1", 2)
            settings = dataclasses.replace(cluster.settings, port=port, router_policy=policy)
            routers.append(RouterRuntime(settings, cluster.replica_urls, metrics_port=port + 1))
            routers[-1].start()
        urls = {router.settings.router_policy: router.base_url for router in routers}
        wait_until(lambda: all(map(all_workers_routable, urls.values())), 30, "each router to route to both replicas")
        yield urls
    finally:
        for router in routers:
            router.stop(quiet=True)


@pytest.mark.server
@pytest.mark.slow
def test_a_killed_replica_costs_no_new_request_under_every_policy(cluster: Cluster) -> None:
    """SIGKILL one replica's API server, then at once, through a router of each policy side by side, 20 requests one
    after another: every one is answered. The same 20 went to both replicas before the kill, so each policy (a
    prefix's replica, a session's) sends some of them to the dead one; the router's retries and its circuit breaker
    (serve/engines/router.py) send those elsewhere. Each router has its own health checks and breaker: the five
    meet the same dead replica independently."""
    prompts = [
        (f"Request {n}: name a {('colour', 'fruit', 'city', 'tree')[n % 4]}.", f"session-{n}") for n in range(20)
    ]
    with a_router_for_each_policy(cluster) as routers:
        where = {
            policy: [served_by(cluster, partial(complete, url, *prompt)) for prompt in prompts]
            for policy, url in routers.items()
        }
        # the victim: a replica every policy sends some of these prompts to
        reached_by_all = [i for i in (1, 0) if all(i in sent for sent in where.values())]
        assert reached_by_all, where
        victim_index = reached_by_all[0]
        victim = cluster.engines[victim_index]
        record = victim.server.record()
        assert record is not None and record.server_pid is not None
        os.kill(record.server_pid, signal.SIGKILL)
        with ThreadPoolExecutor(len(routers)) as pool:
            answered = dict(
                zip(
                    routers,
                    pool.map(lambda url: [complete(url, *prompt) for prompt in prompts], routers.values()),
                    strict=True,
                )
            )
        assert not all_workers_routable(victim.base_url), "the killed replica came back before the last request"
    failed = {}
    for policy, answers in answered.items():
        failed[policy] = [(n, r.status_code, r.text[:200]) for n, r in enumerate(answers) if r.status_code != 200]
        print(
            f"{policy}: {len(answers) - len(failed[policy])}/20 answered right after the kill; "
            f"{where[policy].count(victim_index)} of them had gone to the killed replica before"
        )
        # a whole completion from a live replica: vLLM finished it and counted its tokens (its text may be empty: the
        # model can end its answer at the first token; a bare run here got one empty 200 among cache_aware's 20)
        assert all(finished(r.json()) for r in answers if r.status_code == 200), (policy, [r.text for r in answers])
    assert failed == {policy: [] for policy in ROUTER_POLICIES}, failed
    # the kit's supervisor restarts it and the cluster's router takes it back (down.sh then finds it whole)
    wait_until(lambda: router_health(cluster, victim.base_url) == 1, 600, "the killed replica to rejoin the rotation")
