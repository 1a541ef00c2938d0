"""Kubernetes from the same .env: `python -m serve.kube` writes production-stack Helm values and plain manifests.

OUT/values.yaml is for vLLM production-stack's chart `vllm-stack` (serve/kube/values.py); OUT/manifests/ needs no
chart, `kubectl apply -k OUT/manifests` (serve/kube/manifests.py). Both come from one engine spec
(serve/kube/spec.py), refused where the Docker track's preflight refuses it. labs/scale.md is the walk-through.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from serve.config.settings import Settings
from serve.engines.tracks import CPU, GPU, Track
from serve.kube import manifests as kube_manifests
from serve.kube import values as kube_values
from serve.kube.spec import engine_spec
from ui.cli import KitArgumentParser
from ui.progress import console, fail, warn
from ui.values import SettingsError, pinned_image

DEFAULT_NAMESPACE = "vllm-lab-kit"
# Prometheus's community chart (prometheus-community/prometheus) in namespace monitoring: it scrapes pods that
# carry the prometheus.io/* annotations both renderings give the engine pods.
DEFAULT_PROMETHEUS_URL = "http://prometheus-server.monitoring.svc"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
HTTP_URL = re.compile(r"^https?://[^\s/]+\S*$")
DEFAULT_OUT = Path("k8s")


def parse_namespace(text: str) -> str:
    if not DNS_LABEL.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a namespace: lower-case letters, digits and '-', "
            "at most 63, starting and ending with a letter or digit"
        )
    return text


def parse_url(text: str) -> str:
    if not HTTP_URL.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a URL KEDA can ask: use http://host[:port], such as {DEFAULT_PROMETHEUS_URL}"
        )
    return text.rstrip("/")


def parse_image(text: str) -> str:
    try:
        return pinned_image("--image", text)
    except SettingsError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--image=")) from None


def render(
    settings: Settings, out: Path, track: Track, image: str | None, namespace: str, prometheus_url: str
) -> list[Path]:
    """Write OUT/values.yaml (the vllm-stack chart) and OUT/manifests/ (kubectl apply -k); return the paths."""
    spec = engine_spec(settings, track, image)
    if not settings.keda_min_replicas <= settings.replicas <= settings.keda_max_replicas:
        bound = min(max(settings.replicas, settings.keda_min_replicas), settings.keda_max_replicas)
        warn(
            f"REPLICAS={settings.replicas} is outside KEDA_MIN_REPLICAS..KEDA_MAX_REPLICAS "
            f"({settings.keda_min_replicas}..{settings.keda_max_replicas}): once KEDA runs, the engine has {bound}"
        )
    written = [kube_values.write(settings, spec, out / "values.yaml", prometheus_url)]
    written += kube_manifests.write(settings, spec, out / "manifests", namespace, prometheus_url)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = KitArgumentParser(prog="python -m serve.kube", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder to write (default: k8s)")
    parser.add_argument(
        "--track",
        choices=("cpu", "gpu"),
        help="engine image and resources; default: gpu when RUNTIME=docker-gpu, else cpu",
    )
    parser.add_argument(
        "--image",
        type=parse_image,
        help="engine image, pinned (default: the kit's CPU image, vllm-lab-kit/vllm-cpu:CPU_IMAGE_TAG, or GPU_IMAGE)",
    )
    parser.add_argument(
        "--namespace",
        type=parse_namespace,
        default=DEFAULT_NAMESPACE,
        help=f"namespace of the plain manifests (default: {DEFAULT_NAMESPACE})",
    )
    parser.add_argument(
        "--prometheus-url",
        type=parse_url,
        default=DEFAULT_PROMETHEUS_URL,
        help=f"the Prometheus KEDA asks (default: {DEFAULT_PROMETHEUS_URL})",
    )
    args = parser.parse_args(argv)
    try:
        settings = Settings.load()
        track = {"cpu": CPU, "gpu": GPU}[args.track or ("gpu" if settings.runtime == "docker-gpu" else "cpu")]
        written = render(settings, args.out, track, args.image, args.namespace, args.prometheus_url)
    except SettingsError as exc:
        fail(str(exc), code=2)
    for path in written:
        console.print(f"wrote {path}")
    console.print(
        f"[green]✓[/green] {settings.model_name}: {track.service} image, {settings.replicas} "
        f"replica(s), KEDA {settings.keda_min_replicas}-{settings.keda_max_replicas} at "
        f"{settings.keda_queue_threshold:g} waiting per replica, router policy {settings.router_policy}. "
        "Next: labs/scale.md"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
