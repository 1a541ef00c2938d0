"""The doctor behind a router (REPLICAS > 1): every replica's /metrics side by side, their sum, and whether
the router spreads the work.

Imbalance policy: the replicas are judged on the requests each holds now (running + waiting) and on the
requests each has finished (vllm:request_success_total). One holding at least IMBALANCE_RATIO times the
least busy one's, by at least IMBALANCE_MIN_REQUESTS, is named: under cache_aware that is expected for a
shared prefix (it keeps it where it is cached) until the load gap passes the router's balance thresholds;
under round_robin it means a replica is slower or was out of the rotation.
"""

from __future__ import annotations

import httpx
from rich.table import Table

from serve.config.settings import Settings
from serve.engines.replicas import metrics_port
from serve.processes.metrics import MetricsSnapshot

IMBALANCE_RATIO = 2.0
IMBALANCE_MIN_REQUESTS = 4


def router_line(settings: Settings) -> str:
    """Whether the router's own Prometheus endpoint answers, and with how many lines of metrics."""
    url = f"{settings.url_for(metrics_port(settings))}/metrics"
    try:
        response = httpx.get(url, timeout=5.0)
    except httpx.HTTPError as exc:
        return f"router metrics: {url} unreachable ({exc.__class__.__name__})"
    series = [line for line in response.text.splitlines() if line and not line.startswith("#")]
    return f"router metrics: {url} answers ({len(series)} series; policy ROUTER_POLICY={settings.router_policy})"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def table(named: list[tuple[str, MetricsSnapshot]], combined: MetricsSnapshot) -> Table:
    grid = Table(box=None, pad_edge=False)
    for column in ("replica", "running", "waiting", "KV usage", "prefix hits", "finished"):
        grid.add_column(column, justify="left" if column == "replica" else "right")

    def hits(snapshot: MetricsSnapshot) -> str:
        if not snapshot.prefix_queries_total:
            return "-"
        return f"{(snapshot.prefix_hits_total or 0) / snapshot.prefix_queries_total:.0%}"

    for name, snapshot in [*named, ("sum", combined)]:
        grid.add_row(
            name,
            f"{snapshot.running:g}",
            f"{snapshot.waiting:g}",
            _share(snapshot.kv_usage),
            hits(snapshot),
            f"{snapshot.requests_done_total:g}",
        )
    return grid


def imbalance(named: list[tuple[str, MetricsSnapshot]], policy: str) -> str | None:
    """One line naming the busiest and the idlest replica when they differ past the policy above; else None."""
    for what, value in (("holds", lambda s: s.running + s.waiting), ("has finished", lambda s: s.requests_done_total)):
        ranked = sorted(named, key=lambda item: value(item[1]))
        (low_name, low), (high_name, high) = ranked[0], ranked[-1]
        if value(high) - value(low) >= IMBALANCE_MIN_REQUESTS and value(high) >= IMBALANCE_RATIO * value(low):
            why = (
                "cache_aware keeps shared prefixes on one replica until the load gap passes its balance thresholds"
                if policy == "cache_aware"
                else "a replica is slower, or was out of the rotation (restarted, failed health checks)"
            )
            return (
                f"imbalance: {high_name} {what} {value(high):g} requests, {low_name} {value(low):g} "
                f"(ROUTER_POLICY={policy}: {why})"
            )
    return None
