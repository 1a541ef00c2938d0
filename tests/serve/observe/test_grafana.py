"""Grafana's provisioning for compose's observe profile, checked statically (Grafana cannot run here: no registry
ships it and Docker Hub is out of reach): the provisioning files parse and point at the dashboards compose mounts,
every dashboard loads as JSON with its own uid and queries the provisioned data source, and every metric name its
queries use is on the live vLLM's /metrics, except those labs/observe.md lists as absent, with why."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from serve.observe import scrape
from tests.conftest import ROOT, Server
from tests.test_compose import COMPOSE, interpolate

GRAFANA = ROOT / "serve" / "observe" / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*/*.json"))
PAGE = ROOT / "labs" / "observe.md"
DATASOURCE_UID = "prometheus"
# PromQL words that are not metric names: functions are followed by "(", these are not always
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or", "unless"}
IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def observe_services() -> dict:
    services = interpolate(yaml.safe_load(COMPOSE.read_text()), {})["services"]
    return {name: service for name, service in services.items() if "observe" in service.get("profiles", [])}


def mounts(service: dict) -> dict[str, Path]:
    """Container path -> the repository path compose binds there (named volumes left out)."""
    found = {}
    for volume in service["volumes"]:
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            found[target] = ROOT / source
    return found


def in_container(service: dict, path: str) -> Path:
    """The repository path behind a path inside the container."""
    for target, source in mounts(service).items():
        if path == target or path.startswith(target + "/"):
            return source / path[len(target) :].lstrip("/")
    raise AssertionError(f"{path} is not in any folder compose mounts")


def walk(node: object, key: str) -> list:
    """Every value under `key`, anywhere in a parsed JSON document."""
    if isinstance(node, dict):
        return [*([node[key]] if key in node else []), *(v for value in node.values() for v in walk(value, key))]
    if isinstance(node, list):
        return [v for value in node for v in walk(value, key)]
    return []


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: label matchers, ranges, grouping clauses, strings and functions
    removed, what is left are names."""
    bare = re.sub(r'"[^"]*"', "", expr)
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", bare)
    bare = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", bare)
    names = set()
    for match in IDENTIFIER.finditer(bare):
        word, after = match.group(), bare[match.end() :].lstrip()
        if after.startswith("(") or word in PROMQL_WORDS or word.startswith("$"):
            continue
        if bare[max(0, match.start() - 1)] == "$":  # $model_name, $__rate_interval
            continue
        names.add(word)
    return names


def dashboard_metrics() -> dict[str, set[str]]:
    """Metric name -> the dashboard folders that query it."""
    found: dict[str, set[str]] = {}
    for path in DASHBOARDS:
        for expr in walk(json.loads(path.read_text()), "expr"):
            for name in metric_names(expr):
                found.setdefault(name, set()).add(path.parent.name)
    return found


def absent_table() -> dict[str, str]:
    """labs/observe.md's table of the metrics a CPU vLLM does not publish: name -> dashboard folder."""
    rows = re.findall(r"^\| `([^`]+)` \| ([\w-]+) \| [^|]+ \|$", PAGE.read_text(), re.M)
    return dict(rows)


def test_the_metric_name_reader_reads_what_grafana_would_query() -> None:
    expr = (
        'histogram_quantile(0.99, sum by(le) (rate(vllm:e2e_request_latency_seconds_bucket{model_name="$model_name"}'
        "[$__rate_interval])))\n/\nrate(vllm:e2e_request_latency_seconds_count[5m]) > bool 0 or vector(0)"
    )
    assert metric_names(expr) == {"vllm:e2e_request_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_count"}
    assert metric_names("sum(max by (server) (vllm:healthy_pods_total))") == {"vllm:healthy_pods_total"}


def test_every_dashboard_loads_as_json_with_its_own_uid_and_its_licence() -> None:
    assert {path.parent.name for path in DASHBOARDS} == {"vllm", "production-stack"}
    uids = []
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        assert dashboard["title"] and dashboard["panels"], path
        assert walk(dashboard, "expr"), f"{path} queries nothing"
        uids.append(dashboard["uid"])
        assert (path.parent / "LICENSE").read_text().lstrip().startswith("Apache License")
        assert "commit" in (path.parent / "README.md").read_text()  # where it came from, exactly
    assert len(set(uids)) == len(uids), "two dashboards with one uid: Grafana would provision only one"


def test_every_query_reads_the_provisioned_data_source() -> None:
    (source,) = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yaml").read_text())[
        "datasources"
    ]
    assert source["uid"] == DATASOURCE_UID and source["type"] == "prometheus" and source["isDefault"]
    assert source["jsonData"]["timeInterval"] == f"{scrape.SCRAPE_INTERVAL_S}s"  # $__rate_interval's floor
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        variables = {var["name"]: var for var in dashboard.get("templating", {}).get("list", [])}
        for reference in walk(dashboard["panels"], "datasource"):
            uid = reference["uid"] if isinstance(reference, dict) else reference
            if uid.startswith("${"):
                variable = variables[uid[2:-1]]  # a data-source variable: it must select the provisioned one
                assert variable["type"] == "datasource" and variable["query"] == "prometheus", path
                assert variable["current"]["value"] == DATASOURCE_UID, path
            else:
                assert uid == DATASOURCE_UID, f"{path}: {reference}"


def test_compose_mounts_the_provisioning_and_the_dashboards_where_its_files_say() -> None:
    services = observe_services()
    assert set(services) == {"prometheus", "grafana"}
    grafana, prometheus = services["grafana"], services["prometheus"]
    provisioning = in_container(grafana, "/etc/grafana/provisioning")
    assert provisioning == GRAFANA / "provisioning"
    providers = yaml.safe_load((provisioning / "dashboards" / "kit.yaml").read_text())["providers"]
    folders = {in_container(grafana, provider["options"]["path"]) for provider in providers}
    assert folders == {path.parent for path in DASHBOARDS}
    home = in_container(grafana, grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert home in DASHBOARDS
    source_url = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"][0]["url"]
    assert source_url == "http://127.0.0.1:${PROMETHEUS_PORT}" and grafana["environment"]["PROMETHEUS_PORT"] == "9099"
    config = next(arg for arg in prometheus["command"] if arg.startswith("--config.file="))
    assert in_container(prometheus, config.split("=", 1)[1]) == scrape.CONFIG_PATH  # the file serve.observe writes
    assert "--web.listen-address=127.0.0.1:9099" in prometheus["command"]


def test_the_observe_services_are_pinned_and_stay_on_this_machine() -> None:
    for name, service in observe_services().items():
        tag = service["image"].rsplit(":", 1)[1]
        assert tag and tag != "latest", name
        assert service["network_mode"] == "host" and "ports" not in service, name  # nothing published
    assert observe_services()["grafana"]["environment"]["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"


def test_every_metric_the_dashboards_query_is_on_the_live_vllm_or_listed_as_absent(vllm_server: Server) -> None:
    """The live vLLM 0.32 (CPU) of the harness against the dashboards' queries: a name neither published nor listed
    fails, and so does a listed name the engine publishes after all (the page would be lying)."""
    text = httpx.get(f"{vllm_server.base_url}/metrics", timeout=30).text
    published = {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}
    queried = dashboard_metrics()
    listed = absent_table()
    assert listed, "labs/observe.md lists no absent metric: its table was not found"
    missing = {name: sorted(folders) for name, folders in queried.items() if name not in published}
    assert {name: [listed.get(name)] for name in missing} == {name: folders for name, folders in missing.items()}, (
        "metrics the dashboards query that the live vLLM does not publish, against labs/observe.md's table"
    )
    assert set(listed) <= set(queried), "labs/observe.md lists a metric no dashboard queries"
    vllm_own = {name for name, folders in queried.items() if "vllm" in folders}
    assert vllm_own and vllm_own <= published, "vLLM's own dashboard queries a metric vLLM 0.32 does not publish"
