"""Kubernetes from the same .env (`python -m serve.kube`), validated offline.

Core manifests: kubernetes-validate in strict mode (unknown fields are errors), against the oldest and newest
Kubernetes it knows. The ScaledObject: KEDA's own CRD schema, strict as the API server's field validation is.
values.yaml: production-stack's values.schema.json. The folder: `kubectl kustomize`. The third-party schemas
are in tests/data/ with their licences. No cluster is needed, and none is claimed: labs/scale.md says what a
real cluster adds.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import ValidationError, all_versions

from serve.config.paths import ROOT
from serve.config.settings import Settings
from serve.engines.tracks import CPU, GPU, container_command
from serve.kube import __main__ as kube
from serve.kube import spec as kube_spec
from tests.conftest import kit_env
from tests.support.docs import BASH_BLOCK, doc_examples, run_doc, shows

DATA = Path(__file__).parents[2] / "data"
CHART_SCHEMA = json.loads((DATA / "production-stack" / "values.schema.json").read_text())
KEDA_CRD = yaml.safe_load((DATA / "keda" / "keda.sh_scaledobjects.yaml").read_text())
K8S_VERSIONS = (min(all_versions()), max(all_versions()))
PROMETHEUS = "http://prometheus-server.monitoring.svc"
SECRET_VALUE = "kube-test-key-0123"
CHART_VERSION = "0.1.12"  # tests/data/production-stack/README.md
TRIGGERS = (
    "properties",
    "servingEngineSpec",
    "properties",
    "modelSpec",
    "items",
    "properties",
    "keda",
    "properties",
    "triggers",
)


def kube_command(out: Path, *options: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m serve.kube --out OUT OPTIONS...` as a user runs it, with these settings."""
    return subprocess.run(
        [sys.executable, "-m", "serve.kube", "--out", str(out), *options],
        cwd=ROOT,
        env=kit_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def render(out: Path, track=CPU, **env: str) -> dict:
    """Render for settings `env` over the defaults; returns {'values': ..., 'manifests': {file: [objects]}}."""
    settings = Settings.from_env(env)
    kube.render(settings, out, track, None, kube.DEFAULT_NAMESPACE, PROMETHEUS)
    manifests = {
        path.name: list(yaml.safe_load_all(path.read_text())) for path in sorted((out / "manifests").glob("*.yaml"))
    }
    return {"values": yaml.safe_load((out / "values.yaml").read_text()), "manifests": manifests}


def objects(rendered: dict) -> list[dict]:
    return [obj for name, docs in rendered["manifests"].items() if name != "kustomization.yaml" for obj in docs]


def one(rendered: dict, kind: str, name: str) -> dict:
    [found] = [obj for obj in objects(rendered) if obj["kind"] == kind and obj["metadata"]["name"] == name]
    return found


def strict(schema: dict) -> dict:
    """The schema with unknown fields refused wherever it lists the known ones (as kubectl --validate=strict
    refuses them for a custom resource), unless it preserves unknown fields on purpose."""
    schema = copy.deepcopy(schema)

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def scaled_object_schema() -> dict:
    [version] = [v for v in KEDA_CRD["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = strict(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta: checked by the API server, not the CRD
    return schema


def chart_schema_as_the_template_reads_it() -> dict:
    """production-stack's schema with its one known error fixed: keda.triggers is a list in the chart's template
    (scaledobject-vllm.yaml) and in its own tests (helm/tests/keda_test.yaml), an object in values.schema.json."""
    schema = copy.deepcopy(CHART_SCHEMA)
    node = schema
    for key in TRIGGERS[:-1]:
        node = node[key]
    node["triggers"] = {"type": "array", "items": node["triggers"]}
    return schema


@pytest.fixture(scope="module")
def default(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return render(tmp_path_factory.mktemp("kube"))


def test_every_core_manifest_passes_strict_kubernetes_validation(default: dict) -> None:
    core = [obj for obj in objects(default) if obj["kind"] != "ScaledObject"]
    assert {obj["kind"] for obj in core} == {
        "Namespace",
        "Deployment",
        "Service",
        "ServiceAccount",
        "Role",
        "RoleBinding",
    }
    for version in K8S_VERSIONS:
        for obj in core:
            kubernetes_validate.validate(obj, version, strict=True)


def test_strict_validation_refuses_a_misspelt_field(default: dict) -> None:
    engine = copy.deepcopy(one(default, "Deployment", kube_spec.ENGINE))
    engine["spec"]["template"]["spec"]["containers"][0]["resource"] = {}  # resources, misspelt
    with pytest.raises(ValidationError):
        kubernetes_validate.validate(engine, K8S_VERSIONS[1], strict=True)


def test_scaled_object_matches_kedas_crd_and_scales_the_engine_on_the_queue(default: dict) -> None:
    scaled = one(default, "ScaledObject", kube_spec.ENGINE)
    jsonschema.validate(scaled, scaled_object_schema())
    spec = scaled["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": kube_spec.ENGINE}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 3)
    [trigger] = spec["triggers"]
    assert trigger["type"] == "prometheus"
    assert trigger["metadata"] == {
        "serverAddress": PROMETHEUS,
        "threshold": "5",
        "query": 'sum(vllm:num_requests_waiting{model_name="HuggingFaceTB/SmolLM2-135M-Instruct"})',
    }
    broken = copy.deepcopy(scaled)
    broken["spec"]["maxReplicaCount"] = "3"  # a string where KEDA wants an integer
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, scaled_object_schema())
    broken = copy.deepcopy(scaled)
    broken["spec"]["maxReplicas"] = 3  # the HPA's name for it, unknown to KEDA
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, scaled_object_schema())


def test_values_match_the_charts_schema(default: dict) -> None:
    values = default["values"]
    jsonschema.validate(values, chart_schema_as_the_template_reads_it())
    errors = list(jsonschema.Draft202012Validator(CHART_SCHEMA).iter_errors(values))
    # The chart's own schema still calls triggers an object: only there may the values disagree with it
    # (labs/scale.md installs with --skip-schema-validation for that). When upstream fixes it, this fails.
    assert [(list(error.absolute_path), error.validator) for error in errors] == [
        (["servingEngineSpec", "modelSpec", 0, "keda", "triggers"], "type")
    ]
    bad = copy.deepcopy(values)
    bad["routerSpec"]["routingLogic"] = "cache_aware"  # vllm-router's name, not the chart's
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, chart_schema_as_the_template_reads_it())


def test_values_use_only_keys_the_chart_knows(default: dict) -> None:
    """A misspelt key is silently ignored by helm: every key written must be one the chart's schema names,
    down to the objects the chart copies into the pod as they are (resources, env, volumes, triggers)."""
    passthrough = {
        "resources",
        "env",
        "extraVolumes",
        "extraVolumeMounts",
        "triggers",
        "containerSecurityContext",
        "startupProbe",
        "podAnnotations",
    }

    def check(values: object, schema: dict, path: str) -> None:
        if isinstance(values, dict) and "properties" in schema:
            for key, value in values.items():
                assert key in schema["properties"], f"{path}.{key} is not in the chart's values.schema.json"
                if key not in passthrough:
                    check(value, schema["properties"][key], f"{path}.{key}")
        elif isinstance(values, list) and "items" in schema:
            for index, value in enumerate(values):
                check(value, schema["items"], f"{path}[{index}]")

    check(default["values"], CHART_SCHEMA, "values")


def test_values_carry_the_settings(default: dict) -> None:
    engine = default["values"]["servingEngineSpec"]
    [model] = engine["modelSpec"]
    assert model["modelURL"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert (model["repository"], model["tag"]) == ("vllm-lab-kit/vllm-cpu", "0.9.1-oe2403lts")
    assert model["replicaCount"] == 1
    assert model["resources"]["limits"] == {"cpu": "4", "memory": "5Gi"}  # CPU_LIMIT, MEMORY_LIMIT=5g
    assert model["vllmConfig"]["maxModelLen"] == 1024 and model["vllmConfig"]["enablePrefixCaching"] is True
    assert {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "2"} in model["env"]
    assert (model["keda"]["minReplicaCount"], model["keda"]["maxReplicaCount"]) == (1, 3)
    assert model["keda"]["triggers"][0]["metadata"]["threshold"] == "5"
    assert default["values"]["routerSpec"] == {"routingLogic": "prefixaware"}  # ROUTER_POLICY=cache_aware
    assert "vllmApiKey" not in engine  # no key set, none asked of the cluster


def test_engine_runs_the_docker_cpu_tracks_command_with_prefix_caching(default: dict) -> None:
    settings = Settings.from_env({})
    container = one(default, "Deployment", kube_spec.ENGINE)["spec"]["template"]["spec"]["containers"][0]
    compose_args = container_command(settings, kube_spec.resolve_for_pod(settings, CPU), CPU)
    assert container["args"] == [*compose_args, "--enable-prefix-caching"]
    assert container["image"] == "vllm-lab-kit/vllm-cpu:0.9.1-oe2403lts"
    assert container["securityContext"]["capabilities"] == {"add": ["SYS_NICE"]}


def test_router_discovers_the_engine_pods_with_the_policy(default: dict) -> None:
    router = one(default, "Deployment", kube_spec.ROUTER)
    pod = router["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"].startswith("vllm/vllm-router:v") and container["command"] == ["vllm-router"]
    args = container["args"]
    assert args[args.index("--policy") + 1] == "cache_aware"
    assert "--service-discovery" in args
    engine_labels = one(default, "Deployment", kube_spec.ENGINE)["spec"]["template"]["metadata"]["labels"]
    selector = args[args.index("--selector") + 1 : args.index("--service-discovery-namespace")]
    assert selector and all(engine_labels[key] == value for key, value in (pair.split("=") for pair in selector))
    assert args[args.index("--service-discovery-port") + 1] == "8000"
    assert pod["serviceAccountName"] == kube_spec.ROUTER
    role = one(default, "Role", kube_spec.ROUTER)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]


def test_settings_flow_into_both_outputs_and_the_key_stays_out(tmp_path: Path) -> None:
    rendered = render(
        tmp_path,
        REPLICAS="3",
        ROUTER_POLICY="consistent_hash",
        KEDA_MIN_REPLICAS="2",
        KEDA_MAX_REPLICAS="5",
        KEDA_QUEUE_THRESHOLD="2.5",
        VLLM_API_KEY=SECRET_VALUE,
        MEMORY_LIMIT="6144m",
        CPU_LIMIT="1.5",
    )
    assert one(rendered, "Deployment", kube_spec.ENGINE)["spec"]["replicas"] == 3
    args = one(rendered, "Deployment", kube_spec.ROUTER)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--policy") + 1] == "consistent_hash"
    assert args[args.index("--api-key") + 1] == "$(VLLM_API_KEY)"
    scaled = one(rendered, "ScaledObject", kube_spec.ENGINE)["spec"]
    assert (scaled["minReplicaCount"], scaled["maxReplicaCount"]) == (2, 5)
    assert scaled["triggers"][0]["metadata"]["threshold"] == "2.5"
    engine = one(rendered, "Deployment", kube_spec.ENGINE)["spec"]["template"]["spec"]["containers"][0]
    assert engine["resources"]["limits"] == {"cpu": "1500m", "memory": "6Gi"}
    assert {
        "name": "VLLM_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": kube_spec.API_KEY_SECRET, "key": "VLLM_API_KEY"}},
    } in engine["env"]
    values = rendered["values"]
    assert values["servingEngineSpec"]["modelSpec"][0]["replicaCount"] == 3
    assert values["routerSpec"]["routingLogic"] == "session" and values["routerSpec"]["sessionKey"] == "x-session-id"
    assert values["servingEngineSpec"]["vllmApiKey"] == {
        "secretName": kube_spec.API_KEY_SECRET,
        "secretKey": "VLLM_API_KEY",
    }
    assert "VLLM_API_KEY" not in {entry["name"] for entry in values["servingEngineSpec"]["modelSpec"][0]["env"]}
    for path in tmp_path.rglob("*.yaml"):
        assert SECRET_VALUE not in path.read_text(), f"{path} holds the API key's value"
    for version in K8S_VERSIONS:
        for obj in objects(rendered):
            if obj["kind"] != "ScaledObject":
                kubernetes_validate.validate(obj, version, strict=True)
    jsonschema.validate(one(rendered, "ScaledObject", kube_spec.ENGINE), scaled_object_schema())
    jsonschema.validate(values, chart_schema_as_the_template_reads_it())


def test_gpu_track_asks_for_a_gpu_and_the_pinned_image(tmp_path: Path) -> None:
    rendered = render(tmp_path, GPU, MAX_NUM_SEQS="64")
    engine = one(rendered, "Deployment", kube_spec.ENGINE)["spec"]["template"]["spec"]["containers"][0]
    assert engine["image"] == "vllm/vllm-openai:v0.32.0"
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "--gpu-memory-utilization" in engine["args"] and "--swap-space" not in engine["args"]
    assert "securityContext" not in engine
    [model] = rendered["values"]["servingEngineSpec"]["modelSpec"]
    assert model["vllmConfig"]["gpuMemoryUtilization"] == 0.9 and model["vllmConfig"]["maxNumSeqs"] == 64
    assert "runtimeClassName" not in model  # the chart's default: nvidia
    for obj in objects(rendered):
        if obj["kind"] != "ScaledObject":
            kubernetes_validate.validate(obj, K8S_VERSIONS[1], strict=True)
    jsonschema.validate(rendered["values"], chart_schema_as_the_template_reads_it())


def test_a_policy_the_charts_router_lacks_falls_back_and_says_so(tmp_path: Path) -> None:
    result = kube_command(tmp_path, ROUTER_POLICY="power_of_two")
    assert result.returncode == 0, result.stderr
    assert "power_of_two has no equivalent in production-stack's router" in result.stderr
    assert yaml.safe_load((tmp_path / "values.yaml").read_text())["routerSpec"]["routingLogic"] == "roundrobin"
    router = yaml.safe_load((tmp_path / "manifests" / "router-deployment.yaml").read_text())
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--policy") + 1] == "power_of_two"  # vllm-router has it


def test_replicas_outside_kedas_bounds_are_written_with_a_warning(tmp_path: Path) -> None:
    result = kube_command(tmp_path, REPLICAS="5")
    assert result.returncode == 0, result.stderr
    assert "REPLICAS=5 is outside KEDA_MIN_REPLICAS..KEDA_MAX_REPLICAS (1..3)" in " ".join(result.stderr.split())
    engine = yaml.safe_load((tmp_path / "manifests" / "engine-deployment.yaml").read_text())
    assert engine["spec"]["replicas"] == 5


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("KEDA_MAX_REPLICAS", "0", "KEDA_MAX_REPLICAS='0' is invalid"),
        ("ROUTER_POLICY", "least_loaded", "ROUTER_POLICY='least_loaded' is invalid"),
        ("MEMORY_LIMIT", "lots", "MEMORY_LIMIT='lots' is invalid"),
        ("MAX_MODEL_LEN", "100000", "MAX_MODEL_LEN"),  # beyond SmolLM2's context: the Docker track's preflight
    ],
)
def test_a_bad_setting_is_refused_with_one_line_and_nothing_written(
    tmp_path: Path, name: str, value: str, says: str
) -> None:
    result = kube_command(tmp_path / "k8s", **{name: value})
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], result.stderr
    assert not (tmp_path / "k8s").exists()


def test_a_bad_option_is_refused_where_it_is_typed(tmp_path: Path) -> None:
    for option, value in (
        ("--namespace", "Kit_NS"),
        ("--image", "myregistry/vllm-cpu:latest"),
        ("--prometheus-url", "prometheus:9090"),
    ):
        result = kube_command(tmp_path, option, value)
        assert result.returncode == 2 and result.stderr.startswith("error: python -m serve.kube:"), result.stderr


def kustomize(folder: Path) -> list[dict]:
    """The objects `kubectl kustomize FOLDER` builds. kubectl is part of the test set-up (tests/system-packages.sh
    installs Debian's kubernetes-client where none is on PATH), so a missing one fails here: nothing passes
    unchecked."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is not on PATH: run `bash tests/system-packages.sh` (Debian's kubernetes-client)"
    result = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [obj for obj in yaml.safe_load_all(result.stdout) if obj]


def kinds_and_names(found: list[dict]) -> list[tuple[str, str]]:
    return sorted((obj["kind"], obj["metadata"]["name"]) for obj in found)


def test_kubectl_kustomize_builds_every_object(default: dict, tmp_path: Path) -> None:
    render(tmp_path)
    built = kustomize(tmp_path / "manifests")
    assert kinds_and_names(built) == kinds_and_names(objects(default))
    assert {obj["metadata"].get("namespace") for obj in built if obj["kind"] != "Namespace"} == {kube.DEFAULT_NAMESPACE}


PAGE = "labs/scale.md"
CLUSTER_BLOCK = "# on a"  # a ```bash block that opens with "# on a cluster ..." is shown, not run here


def page_blocks() -> list[tuple[bool, list[str]]]:
    """(on a cluster?, commands) for each ```bash block of the page, as tests/docs.py reads commands."""
    blocks = []
    for block in BASH_BLOCK.findall((ROOT / PAGE).read_text()):
        lines = [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]
        blocks.append((lines[0].startswith(CLUSTER_BLOCK), [line for line in lines if not line.startswith("#")]))
    return blocks


def test_scale_page_runs_its_render_commands_and_checks_the_cluster_ones_on_paper(tmp_path: Path) -> None:
    """The render commands run verbatim (into tmp_path instead of k8s/); a cluster command is checked on paper:
    the files it names exist and build, and only commands of cluster tools are left unrun."""

    def here(command: str) -> str:
        return command.replace("--out k8s", f"--out {tmp_path}/k8s").replace(" k8s/", f" {tmp_path}/k8s/")

    blocks = page_blocks()
    assert any(not cluster for cluster, _ in blocks) and any(cluster for cluster, _ in blocks)
    examples = doc_examples(PAGE)
    unrun = []
    for cluster, commands in blocks:
        for command in commands:
            if command.startswith(".venv/bin/python -m serve.kube"):
                result = run_doc(here(command), kit_env(), timeout_s=120)
                assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
                output = result.stdout.replace(f"{tmp_path}/", "")
                missing = shows(output, examples.get(command, []))
                assert not missing, f"{command} no longer prints {missing}"
                if command in examples:  # what the page shows of a command's output, it shows whole
                    wrote = [line for line in output.splitlines() if line.startswith("wrote")]
                    hidden = shows("\n".join(examples[command]), wrote)
                    assert not hidden, f"the page hides files {command} writes: {hidden}"
            else:
                assert cluster, f"{command!r} is neither run by this test nor in a block marked as on a cluster"
                assert command.split()[0] in ("helm", "kubectl", "docker", "curl"), command
                unrun.append(command)
    for command in unrun:
        for named in re.findall(r"(?<=\s)k8s/[\w/.-]+", command):
            assert (tmp_path / named).exists(), f"{command} names {named}, which the render does not write"
        if command.startswith("kubectl apply -k "):  # what it would apply: every object the render wrote there
            folder = Path(here(command).split()[-1])
            written = [
                obj
                for path in sorted(folder.glob("*.yaml"))
                if path.name != "kustomization.yaml"
                for obj in yaml.safe_load_all(path.read_text())
                if obj
            ]
            assert written and kinds_and_names(kustomize(folder)) == kinds_and_names(written), command
        if command.startswith("helm install vllm vllm/vllm-stack"):
            assert f"--version {CHART_VERSION}" in command  # the chart the schema in tests/data comes from
            jsonschema.validate(
                yaml.safe_load((tmp_path / "k8s" / "values.yaml").read_text()), chart_schema_as_the_template_reads_it()
            )
    assert any(command.startswith("kubectl apply -k") for command in unrun)
    assert any(command.startswith("helm install vllm vllm/vllm-stack") for command in unrun)


def test_readme_lists_the_scale_lab() -> None:
    assert "[`labs/scale.md`](labs/scale.md)" in (ROOT / "README.md").read_text()
