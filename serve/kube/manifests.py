"""Settings -> plain Kubernetes manifests that need no chart: `kubectl apply -k OUT/manifests`.

The engine Deployment (REPLICAS pods) and its Service; vllm-router (the vLLM project's own router, image
vllm/vllm-router) finding the engine pods by label through the Kubernetes API, with ROUTER_POLICY; a KEDA
ScaledObject that scales the engine between KEDA_MIN_REPLICAS and KEDA_MAX_REPLICAS on vllm:num_requests_waiting;
and the kustomization that lists them. The router reads pods, so it gets a ServiceAccount and a Role for that.
"""

from __future__ import annotations

import math
from pathlib import Path

from serve.config.settings import Settings
from serve.engines.router import FAILOVER_ARGS
from serve.engines.tracks import CONTAINER_PORT, GPU
from serve.kube.spec import (
    APP,
    ENGINE,
    PROBE_PERIOD_S,
    ROUTER,
    SCRAPE_ANNOTATIONS,
    SHM_SIZE,
    EngineSpec,
    keda_scaling,
    model_slug,
    secret_env,
    write_yaml,
)

# vllm-router's release image (vllm-project/router publishes vllm/vllm-router:v<version>; PyPI's vllm-router
# 0.1.17 is the same release). Its CMD is `vllm-router --host 0.0.0.0 --port 8080`.
ROUTER_IMAGE = "vllm/vllm-router:v0.1.17"
ROUTER_PORT = 8080  # the image's own
ROUTER_SERVICE_PORT = 80
ROUTER_METRICS_PORT = 29000  # vllm-router's --prometheus-port default
ROUTER_RESOURCES = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
ENGINE_LABELS = {"app.kubernetes.io/name": ENGINE, "app.kubernetes.io/part-of": APP}
ROUTER_LABELS = {"app.kubernetes.io/name": ROUTER, "app.kubernetes.io/part-of": APP}
FILES = (
    "namespace.yaml",
    "engine-deployment.yaml",
    "engine-service.yaml",
    "router-rbac.yaml",
    "router-deployment.yaml",
    "router-service.yaml",
    "engine-scaledobject.yaml",
)


def meta(name: str, namespace: str, labels: dict[str, str]) -> dict:
    return {"name": name, "namespace": namespace, "labels": dict(labels)}


def http_probe(path: str, port: str, period_s: int, failures: int) -> dict:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": period_s, "failureThreshold": failures}


def engine_deployment(settings: Settings, spec: EngineSpec, namespace: str) -> dict:
    container: dict = {
        "name": "vllm",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",  # a CPU image loaded onto the nodes (kind, minikube) is found there
        "args": list(spec.args),
        "ports": [{"name": "http", "containerPort": CONTAINER_PORT}],
        "resources": spec.resources,
        # START_TIMEOUT: the first start downloads the model and compiles it; the probes wait that long.
        "startupProbe": http_probe(
            "/health", "http", PROBE_PERIOD_S, math.ceil(settings.start_timeout_s / PROBE_PERIOD_S)
        ),
        "readinessProbe": http_probe("/health", "http", 5, 3),
        "livenessProbe": http_probe("/health", "http", PROBE_PERIOD_S, 3),
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "cache", "mountPath": "/root/.cache"}],
    }
    if spec.env_list:
        container["env"] = spec.env_list
    if spec.track is not GPU:  # vLLM's CPU backend calls NUMA APIs ("get_mempolicy: Operation not permitted")
        container["securityContext"] = {"capabilities": {"add": ["SYS_NICE"]}, "seccompProfile": {"type": "Unconfined"}}
    labels = {**ENGINE_LABELS, f"{APP}/model": model_slug(settings.model_name)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(ENGINE, namespace, labels),
        "spec": {
            "replicas": settings.replicas,  # REPLICAS; the ScaledObject moves it within its bounds
            "selector": {"matchLabels": dict(ENGINE_LABELS)},
            "template": {
                "metadata": {"labels": labels, "annotations": dict(SCRAPE_ANNOTATIONS)},
                "spec": {
                    "containers": [container],
                    "volumes": [
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}},
                        {"name": "cache", "emptyDir": {}},
                    ],  # model download and compile cache
                },
            },
        },
    }


def service(name: str, namespace: str, labels: dict[str, str], ports: dict[str, int]) -> dict:
    """A ClusterIP Service in front of the pods with `labels`: each named container port at its number."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(name, namespace, labels),
        "spec": {
            "selector": dict(labels),
            "ports": [{"name": port, "port": number, "targetPort": port} for port, number in ports.items()],
        },
    }


def router_rbac(namespace: str) -> list[dict]:
    """Kubernetes discovery lists and watches the engine pods of its own namespace: a Role, not a ClusterRole."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(ROUTER, namespace, ROUTER_LABELS)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta(ROUTER, namespace, ROUTER_LABELS),
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta(ROUTER, namespace, ROUTER_LABELS),
            "subjects": [{"kind": "ServiceAccount", "name": ROUTER, "namespace": namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROUTER},
        },
    ]


def router_args(settings: Settings) -> list[str]:
    args = [
        "--host",
        "0.0.0.0",
        "--port",
        str(ROUTER_PORT),
        "--policy",
        settings.router_policy,
        "--service-discovery",
        "--selector",
        *(f"{key}={value}" for key, value in ENGINE_LABELS.items()),
        "--service-discovery-namespace",
        "$(POD_NAMESPACE)",
        "--service-discovery-port",
        str(CONTAINER_PORT),
        "--worker-startup-timeout-secs",
        str(settings.start_timeout_s),
        *FAILOVER_ARGS,  # as REPLICAS runs it here: a dead pod costs no new request (labs/replicas.md)
        "--prometheus-host",
        "0.0.0.0",
        "--prometheus-port",
        str(ROUTER_METRICS_PORT),
    ]
    if settings.api_key:  # the key it sends to the engines; Kubernetes expands $(VLLM_API_KEY) from the Secret
        args += ["--api-key", "$(VLLM_API_KEY)"]
    return args


def router_deployment(settings: Settings, namespace: str) -> dict:
    env = [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
    if settings.api_key:
        env.append(secret_env("VLLM_API_KEY"))
    container = {
        "name": "router",
        "image": ROUTER_IMAGE,
        "command": ["vllm-router"],
        "args": router_args(settings),
        "env": env,
        "ports": [
            {"name": "http", "containerPort": ROUTER_PORT},
            {"name": "metrics", "containerPort": ROUTER_METRICS_PORT},
        ],
        "resources": ROUTER_RESOURCES,
        "readinessProbe": http_probe("/readiness", "http", 5, 3),
        "livenessProbe": http_probe("/liveness", "http", PROBE_PERIOD_S, 3),
    }
    annotations = {**SCRAPE_ANNOTATIONS, "prometheus.io/port": str(ROUTER_METRICS_PORT)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(ROUTER, namespace, ROUTER_LABELS),
        "spec": {
            "replicas": 1,  # cache_aware's prefix tree lives in the router's memory: one router sees every prompt
            "selector": {"matchLabels": dict(ROUTER_LABELS)},
            "template": {
                "metadata": {"labels": dict(ROUTER_LABELS), "annotations": annotations},
                "spec": {"serviceAccountName": ROUTER, "containers": [container]},
            },
        },
    }


def scaled_object(settings: Settings, namespace: str, prometheus_url: str) -> dict:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": meta(ENGINE, namespace, ENGINE_LABELS),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": ENGINE},
            **keda_scaling(settings, prometheus_url),
        },
    }


def documents(settings: Settings, spec: EngineSpec, namespace: str, prometheus_url: str) -> dict[str, list[dict]]:
    """File name -> the objects it holds, in the order kubectl should meet them."""
    return {
        "namespace.yaml": [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": namespace, "labels": {"app.kubernetes.io/part-of": APP}},
            }
        ],
        "engine-deployment.yaml": [engine_deployment(settings, spec, namespace)],
        "engine-service.yaml": [service(ENGINE, namespace, ENGINE_LABELS, {"http": CONTAINER_PORT})],
        "router-rbac.yaml": router_rbac(namespace),
        "router-deployment.yaml": [router_deployment(settings, namespace)],
        "router-service.yaml": [
            service(ROUTER, namespace, ROUTER_LABELS, {"http": ROUTER_SERVICE_PORT, "metrics": ROUTER_METRICS_PORT})
        ],
        "engine-scaledobject.yaml": [scaled_object(settings, namespace, prometheus_url)],
    }


def kustomization(namespace: str) -> dict:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": namespace,
        "resources": list(FILES),
    }


def write(settings: Settings, spec: EngineSpec, folder: Path, namespace: str, prometheus_url: str) -> list[Path]:
    header = "# Written by `python -m serve.kube` from the kit's settings; see labs/scale.md.\n"
    written = [
        write_yaml(folder / name, objects, header)
        for name, objects in documents(settings, spec, namespace, prometheus_url).items()
    ]
    return [*written, write_yaml(folder / "kustomization.yaml", [kustomization(namespace)], header)]
