"""What both Kubernetes renderings share: the engine container for the settings, names, the KEDA trigger.

Both describe the engine pod the Docker tracks run (serve/engines/tracks.py) for the same settings: the kit's CPU image
(or GPU_IMAGE), the vLLM flags and environment compose gets, CPU_LIMIT and MEMORY_LIMIT as the pod's requests
and limits, and VLLM_API_KEY only as a reference to a Secret the user creates (its value never lands in a file).
A pod runs on a node this machine knows nothing of, so `auto` resolves against the pod's limits alone:
CPU_LIMIT cores, MEMORY_LIMIT of memory, and no BF16 instructions assumed (float32 runs on every CPU).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from serve.config import preflight
from serve.config.machine import Machine
from serve.config.plan import Plan
from serve.config.settings import Settings
from serve.config.sizing import MemorySize
from serve.config.vllm_flags import Flag, argv_of, vllm_env, vllm_flags
from serve.engines.tracks import CONTAINER_PORT, CPU, GPU, Track, plan_for_container, target
from ui.progress import console

APP = "vllm-lab-kit"
ENGINE = "vllm-engine"  # the engine Deployment, its Service and the pods' app.kubernetes.io/name
ROUTER = "vllm-router"
API_KEY_SECRET = "vllm-lab-kit-api-key"  # created by the user (labs/scale.md); holds the key VLLM_API_KEY
API_KEY_SECRET_KEY = "VLLM_API_KEY"
# Prometheus's community chart scrapes pods that carry these; both renderings give them to the engine pods.
SCRAPE_ANNOTATIONS = {
    "prometheus.io/scrape": "true",
    "prometheus.io/port": str(CONTAINER_PORT),
    "prometheus.io/path": "/metrics",
}
QUEUE_METRIC = "vllm:num_requests_waiting"
KEDA_POLLING_INTERVAL_S = 15  # how often KEDA asks Prometheus: half its default 30 s, it reacts sooner
PROBE_PERIOD_S = 10
SHM_SIZE = "2Gi"  # as compose's shm_size: PyTorch shares tensors between API server and engine there
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """The engine container as a cluster runs it: image, api_server arguments, environment and resources."""

    track: Track
    image: str
    flags: tuple[tuple[Flag, str], ...]  # the one mapping's, rendered for the pod (serve/config/vllm_flags.py)
    extra_args: tuple[str, ...]  # VLLM_EXTRA_ARGS, after them
    env: dict[str, str]  # never the API key: that comes from API_KEY_SECRET
    cpu: str  # Kubernetes quantities, from CPU_LIMIT and MEMORY_LIMIT
    memory: str
    resolved: Plan
    api_key_secret: bool

    @property
    def args(self) -> tuple[str, ...]:
        """The api_server's arguments (the image's entrypoint is vLLM's api_server, as in compose)."""
        return (*argv_of(list(self.flags)), *self.extra_args)

    @property
    def gpus(self) -> int:
        return 1 if self.track is GPU else 0

    @property
    def resources(self) -> dict:
        """Requests equal limits: a Guaranteed pod, sized as the Docker track's container is capped."""
        amounts: dict[str, str | int] = {"cpu": self.cpu, "memory": self.memory}
        limits = {**amounts, GPU_RESOURCE: self.gpus} if self.gpus else dict(amounts)
        return {"requests": dict(amounts), "limits": limits}

    @property
    def env_list(self) -> list[dict]:
        """The container's env: plain values, then the key from its Secret when VLLM_API_KEY is set."""
        env: list[dict] = [{"name": name, "value": value} for name, value in self.env.items()]
        if self.api_key_secret:
            env.append(secret_env("VLLM_API_KEY"))
        return env


def secret_env(name: str) -> dict:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": API_KEY_SECRET, "key": API_KEY_SECRET_KEY}}}


def k8s_cpu(cores: float) -> str:
    """CPU_LIMIT as a Kubernetes quantity: 4 -> '4', 1.5 -> '1500m'."""
    return str(int(cores)) if float(cores).is_integer() else f"{round(cores * 1000)}m"


def k8s_memory(docker_size: MemorySize) -> str:
    """MEMORY_LIMIT (Docker's 5g, binary units) as a Kubernetes quantity: '5Gi', exact to the byte."""
    size = docker_size.num_bytes
    for suffix, unit in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def pod_machine(settings: Settings) -> Machine:
    """A node we cannot see, as far as the pod may use it: CPU_LIMIT cores, MEMORY_LIMIT, no BF16 flags."""
    return Machine(
        usable_cores=max(1, math.floor(settings.cpu_limit)),
        cpu_flags=frozenset(),
        memory_available_bytes=settings.memory_limit.num_bytes,
    )


def resolve_for_pod(settings: Settings, track: Track) -> Plan:
    return plan_for_container(settings, pod_machine(settings), track, pod=True)


def default_image(settings: Settings, track: Track) -> str:
    """The GPU track's pinned GPU_IMAGE; on CPU the image the Docker CPU track builds (Dockerfile.cpu), which a
    cluster pulls from a registry you push it to (labs/scale.md) or finds loaded on its nodes (kind, minikube)."""
    return settings.gpu_image if track is GPU else f"{APP}/vllm-cpu:{settings.cpu_image_tag}"


def engine_spec(settings: Settings, track: Track, image: str | None = None) -> EngineSpec:
    """What the engine container gets, refused (SettingsError) where the Docker track's preflight refuses."""
    resolved = resolve_for_pod(settings, track)
    for line in preflight.run(settings, resolved, track.runtime).lines():
        console.print(line)
    # A replica behind the router, which keeps a session's turns and shared prompts on one replica: prefix caching
    # makes that pay (before VLLM_EXTRA_ARGS, which stay last so that --no-enable-prefix-caching there still wins).
    pod = dataclasses.replace(target(settings, track), replica=True)
    if track is CPU:
        flags = vllm_flags(settings, resolved, pod)  # the key middleware ships in the kit's CPU image
        env = {name: value for name, value in vllm_env(settings, resolved, pod).items() if name != "VLLM_API_KEY"}
    else:  # vllm/vllm-openai lacks the kit's middleware and tool-call template: vLLM's own key check guards /v1
        pod = dataclasses.replace(pod, chat_template=None)
        flags = vllm_flags(dataclasses.replace(settings, api_key=""), resolved, pod)
        env = {}
    return EngineSpec(
        track,
        image or default_image(settings, track),
        tuple(flags),
        settings.extra_args,
        env,
        k8s_cpu(settings.cpu_limit),
        k8s_memory(settings.memory_limit),
        resolved,
        bool(settings.api_key),
    )


def model_slug(model_name: str) -> str:
    """A DNS label for the model: HuggingFaceTB/SmolLM2-135M-Instruct -> smollm2-135m-instruct."""
    slug = re.sub(r"[^a-z0-9-]+", "-", model_name.rsplit("/", 1)[-1].lower()).strip("-")[:40].strip("-")
    return slug or "model"


def queue_query(model_name: str) -> str:
    """One number for KEDA: its Prometheus scaler refuses a query that returns one series per replica."""
    return f'sum({QUEUE_METRIC}{{model_name="{model_name}"}})'


def keda_trigger(settings: Settings, prometheus_url: str) -> dict:
    """KEDA's prometheus trigger: a replica per KEDA_QUEUE_THRESHOLD requests waiting (its AverageValue type)."""
    return {
        "type": "prometheus",
        "metadata": {
            "serverAddress": prometheus_url,
            "query": queue_query(settings.model_name),
            "threshold": f"{settings.keda_queue_threshold:g}",
        },
    }


def keda_scaling(settings: Settings, prometheus_url: str) -> dict:
    """How KEDA scales the engine, the same in both renderings (a ScaledObject's spec, the chart's `keda`):
    between KEDA_MIN_REPLICAS and KEDA_MAX_REPLICAS, asking Prometheus every KEDA_POLLING_INTERVAL_S. The
    triggers are a list, as a ScaledObject has them and as the chart's template and its own tests write them
    (the chart's values.schema.json says object)."""
    return {
        "minReplicaCount": settings.keda_min_replicas,
        "maxReplicaCount": settings.keda_max_replicas,
        "pollingInterval": KEDA_POLLING_INTERVAL_S,
        "triggers": [keda_trigger(settings, prometheus_url)],
    }


def write_yaml(path: Path, documents: list[dict], header: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False, width=120)
    path.write_text(header + body)
    return path
