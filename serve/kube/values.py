"""Settings -> values for vLLM production-stack's Helm chart `vllm-stack` (helm/values.yaml of
vllm-project/production-stack; tests/data/production-stack/ holds the schema they are checked against).

The chart runs its own Python router (routerSpec), not vllm-router: ROUTER_POLICY maps to its closest
`routingLogic`, and where it has none (power_of_two, random) to roundrobin, said in the file and on stderr.
"""

from __future__ import annotations

import math
from pathlib import Path

import yaml

from serve.config.settings import Settings
from serve.config.vllm_flags import CHART_WRITES, SWITCH, Flag, argv_of
from serve.engines.router import HEALTH_CHECK_INTERVAL_S, HEALTH_FAILURE_THRESHOLD
from serve.engines.tracks import CONTAINER_PORT, GPU
from serve.kube.spec import (
    API_KEY_SECRET,
    API_KEY_SECRET_KEY,
    PROBE_PERIOD_S,
    SCRAPE_ANNOTATIONS,
    SHM_SIZE,
    EngineSpec,
    keda_scaling,
    model_slug,
    write_yaml,
)
from ui.progress import warn

# vllm-router policy -> production-stack routingLogic. prefixaware keeps a prompt on the replica that served
# its longest prefix (as cache_aware); session hashes a header to a replica (as consistent_hash, whose first
# key vllm-router reads is X-Session-ID).
ROUTING_LOGIC = {"cache_aware": "prefixaware", "consistent_hash": "session", "round_robin": "roundrobin"}
FALLBACK_ROUTING_LOGIC = "roundrobin"
SESSION_KEY = "x-session-id"


def routing_logic(policy: str) -> tuple[str, str]:
    """(routingLogic, why) for ROUTER_POLICY."""
    if policy in ROUTING_LOGIC:
        return ROUTING_LOGIC[policy], f"ROUTER_POLICY={policy}"
    return FALLBACK_ROUTING_LOGIC, (
        f"ROUTER_POLICY={policy} has no equivalent in production-stack's router; "
        f"{FALLBACK_ROUTING_LOGIC} instead (the plain manifests' vllm-router has it)"
    )


def vllm_config(spec: EngineSpec) -> dict:
    """vllmConfig from the one mapping's flags: each flag the chart has a key for (Flag.chart), its value as YAML
    types it; the others, then VLLM_EXTRA_ARGS less what the chart owns, as extraArgs. The model, its name, host and
    port the chart writes itself (CHART_WRITES: `vllm serve MODEL --host --port`)."""
    config: dict = {}
    rest: list[tuple[Flag, str]] = []
    for flag, value in spec.flags:
        if flag.chart == CHART_WRITES:
            continue
        if flag.chart:
            config[flag.chart] = True if value == SWITCH else yaml.safe_load(value)
        else:
            rest.append((flag, value))
    owned = {flag.name for flag, _ in spec.flags if flag.chart}
    config["extraArgs"] = [*argv_of(rest), *without(spec.extra_args, owned)]
    return config


def without(args: tuple[str, ...], owned: set[str]) -> list[str]:
    """VLLM_EXTRA_ARGS less the flags the chart was given (`owned`), each with its value when one follows."""
    rest: list[str] = []
    skip = False
    for index, arg in enumerate(args):
        if skip:
            skip = False
        elif arg in owned:
            skip = index + 1 < len(args) and not args[index + 1].startswith("--")
        else:
            rest.append(arg)
    return rest


def model_spec(settings: Settings, spec: EngineSpec, prometheus_url: str) -> dict:
    repository, tag = spec.image.rsplit(":", 1)
    entry: dict = {
        "name": model_slug(settings.model_name),
        "repository": repository,
        "tag": tag,
        "modelURL": settings.model_name,  # `vllm serve MODEL`: downloaded from the hub, served under this name
        "replicaCount": settings.replicas,
        "resources": spec.resources,  # takes priority over requestCPU/requestMemory (integers only)
        "podAnnotations": dict(SCRAPE_ANNOTATIONS),
        # the key is not here: the chart sets VLLM_API_KEY itself from vllmApiKey (a second entry would hide it)
        "env": [{"name": name, "value": value} for name, value in spec.env.items()],
        "vllmConfig": vllm_config(spec),
        "keda": {"enabled": True, **keda_scaling(settings, prometheus_url)},
    }
    if spec.track is not GPU:
        entry["runtimeClassName"] = ""  # the chart's default is nvidia's runtime class
        entry["extraVolumes"] = [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}}]
        entry["extraVolumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm"}]
    return entry


def values(settings: Settings, spec: EngineSpec, prometheus_url: str) -> dict:
    logic, _ = routing_logic(settings.router_policy)
    probe = {"path": "/health", "port": CONTAINER_PORT}
    startup_failures = math.ceil(settings.start_timeout_s / PROBE_PERIOD_S)  # START_TIMEOUT: first start compiles
    engine: dict = {
        "imagePullPolicy": "IfNotPresent",  # a CPU image loaded onto the nodes (kind, minikube) is found there
        "startupProbe": {
            "initialDelaySeconds": 15,
            "periodSeconds": PROBE_PERIOD_S,
            "failureThreshold": startup_failures,
            "httpGet": probe,
        },
        # the chart's router finds the engine pods through Kubernetes and routes only to ready ones: the
        # readiness probe is its health check, as often and as quick to give up as vllm-router's is here
        "readinessProbe": {
            "periodSeconds": HEALTH_CHECK_INTERVAL_S,
            "failureThreshold": HEALTH_FAILURE_THRESHOLD,
            "httpGet": probe,
        },
        "modelSpec": [model_spec(settings, spec, prometheus_url)],
    }
    if spec.track is not GPU:
        engine["runtimeClassName"] = ""
        # vLLM's CPU backend calls NUMA APIs: without SYS_NICE "get_mempolicy: Operation not permitted"
        engine["containerSecurityContext"] = {
            "capabilities": {"add": ["SYS_NICE"]},
            "seccompProfile": {"type": "Unconfined"},
        }
    router: dict = {"routingLogic": logic}
    if logic == "session":
        router["sessionKey"] = SESSION_KEY
    if settings.api_key:
        key_ref = {"secretName": API_KEY_SECRET, "secretKey": API_KEY_SECRET_KEY}
        engine["vllmApiKey"] = dict(key_ref)
        router["vllmApiKey"] = dict(key_ref)
    return {"servingEngineSpec": engine, "routerSpec": router}


def write(settings: Settings, spec: EngineSpec, path: Path, prometheus_url: str) -> Path:
    logic, why = routing_logic(settings.router_policy)
    if logic == FALLBACK_ROUTING_LOGIC and settings.router_policy != "round_robin":
        warn(f"values.yaml: {why}")
    header = (
        f"# vllm-stack chart values from the kit's settings (python -m serve.kube); see labs/scale.md.\n"
        f"# routingLogic {logic}: {why}.\n"
        f"# dtype {spec.resolved.dtype}: {spec.resolved.dtype_reason}.\n"
        f"# failover: an engine pod leaves the rotation after {HEALTH_FAILURE_THRESHOLD} failed readiness probes, "
        f"{HEALTH_CHECK_INTERVAL_S} s apart; the chart's router retries a\n"
        f"# failed request on another pod only where its release has the option (--max-instance-failover-reroute-"
        f"attempts,\n# later --enable-retries --max-retries): add it to routerSpec.extraArgs for the router tag you "
        f"run. The plain manifests' vllm-router has\n# the kit's retries and circuit breaker (labs/replicas.md).\n"
    )
    return write_yaml(path, [values(settings, spec, prometheus_url)], header)
