"""Which model the kit serves and from where (serve/config/model_source.py, serve/config/model.py): the four forms
of MODEL_PATH and the hub's MODEL_NAME, their names, their facts before anything is prepared, and their refusals.

No engine: the forms served for real by both engines are tests/serve/test_your_model.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from client.endpoint import Endpoint
from serve.config import gguf_file
from serve.config import model_source as model_source_module
from serve.config.model import MODEL_DIR, checked_source, model_facts_for, served_chat_template
from serve.config.model_source import ModelKind, model_source
from serve.config.settings import BUNDLED_MODEL_NAME, Settings
from serve.config.sizing import load_model_facts
from serve.install.llamacpp_venv import gguf_path
from tests.conftest import ROOT, free_port, kit_env, run_script
from tests.support.docs import doc_commands, run_doc
from tests.support.hub_standin import hub_standin
from tests.support.learner_models import OLLAMA_TEMPLATE, ollama_store
from ui.values import SettingsError


@pytest.fixture(autouse=True)
def facts_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GGUF's header is kept, and its checkpoint looked for, under the test's own folder, not the machine's cache
    (where an earlier run may have prepared it)."""
    monkeypatch.setattr(gguf_file, "FACTS_DIR", tmp_path / "facts")
    monkeypatch.setattr(model_source_module, "PREPARED_DIR", tmp_path / "models")


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in Ollama store holding smollm2:135m (the bundled GGUF as its blob), found through OLLAMA_MODELS."""
    folder = tmp_path / "ollama-models"
    ollama_store(folder, gguf_path())
    monkeypatch.setenv("OLLAMA_MODELS", str(folder))
    return folder


def settings(**env: str) -> Settings:
    return Settings.from_env(env)


def test_empty_is_the_bundled_model_under_its_own_name() -> None:
    source = model_source(settings())
    assert (source.kind, source.served_name, source.folder, source.served_gguf) == (
        ModelKind.BUNDLED,
        BUNDLED_MODEL_NAME,
        MODEL_DIR,
        None,
    )


def test_an_ollama_model_is_its_blob_served_under_its_ollama_name(store: Path) -> None:
    """MODEL_NAME left at SmolLM2's: the Ollama name, so a client of their Ollama asks both engines the same."""
    chosen = settings(MODEL_PATH="ollama:smollm2:135m")
    source = model_source(chosen)
    assert chosen.model_name == source.served_name == "smollm2:135m"
    assert source.kind is ModelKind.OLLAMA
    assert source.served_gguf == source.gguf and source.gguf is not None
    assert source.gguf.parent == store / "blobs" and source.gguf.read_bytes() == gguf_path().read_bytes()
    assert not source.folder.is_relative_to(store)  # vLLM's checkpoint is prepared outside the store


def test_an_explicit_model_name_wins_over_the_ollama_name(store: Path) -> None:
    assert model_source(settings(MODEL_PATH="ollama:smollm2:135m", MODEL_NAME="mine")).served_name == "mine"


def test_a_gguf_file_and_a_folder_are_served_under_their_own_names(tmp_path: Path) -> None:
    gguf = tmp_path / "my-model.Q4_1.gguf"
    gguf.symlink_to(gguf_path())
    from_gguf = model_source(settings(MODEL_PATH=str(gguf)))
    assert (from_gguf.kind, from_gguf.served_name, from_gguf.served_gguf) == (ModelKind.GGUF, "my-model.Q4_1", gguf)
    from_folder = model_source(settings(MODEL_PATH=str(MODEL_DIR)))
    assert (from_folder.kind, from_folder.served_name, from_folder.folder) == (
        ModelKind.FOLDER,
        MODEL_DIR.name,
        MODEL_DIR,
    )
    converted = from_folder.served_gguf
    assert converted is not None and converted.suffix == ".gguf" and not converted.is_relative_to(MODEL_DIR)


def test_another_model_name_without_model_path_is_the_hubs() -> None:
    source = model_source(settings(MODEL_NAME="Qwen/Qwen2.5-0.5B-Instruct"))
    assert (source.kind, source.served_name, source.origin) == (
        ModelKind.HUB,
        "Qwen/Qwen2.5-0.5B-Instruct",
        "Qwen/Qwen2.5-0.5B-Instruct",
    )
    assert source.folder.name == "Qwen--Qwen2.5-0.5B-Instruct"


def test_a_model_missing_from_the_store_is_one_line_naming_the_pull_and_the_store(store: Path) -> None:
    with pytest.raises(SettingsError) as refused:
        model_source(settings(MODEL_PATH="ollama:llama3.2:1b"))
    line = str(refused.value)
    assert "\n" not in line and line.startswith("MODEL_PATH=ollama:llama3.2:1b is invalid")
    assert "`ollama pull llama3.2:1b`" in line and str(store) in line and "OLLAMA_MODELS" in line


@pytest.mark.parametrize("raw", ["ollama:", "ollama:Bad Name", "ollama:a:b:c"])
def test_a_malformed_ollama_name_is_refused_by_the_setting(raw: str) -> None:
    with pytest.raises(SettingsError, match="ollama:llama3.2:1b"):
        settings(MODEL_PATH=raw)


def test_the_tag_defaults_to_latest_and_a_namespace_is_its_folder(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ollama_store(store, gguf_path(), name="smollm2", tag="latest")
    os.environ["OLLAMA_MODELS"] = str(store)
    try:
        assert model_source(settings(MODEL_PATH="ollama:smollm2")).served_name == "smollm2"
        with pytest.raises(SettingsError, match=r"library/llama3.2/1b|someone/mine/latest"):
            model_source(settings(MODEL_PATH="ollama:someone/mine"))
    finally:
        del os.environ["OLLAMA_MODELS"]


def test_nothing_is_written_into_the_store(store: Path) -> None:
    """The facts, the template: all read, none written beside the learner's files."""
    before = {path: path.stat().st_mtime_ns for path in store.rglob("*")}
    chosen = settings(MODEL_PATH="ollama:smollm2:135m")
    checked_source(chosen)
    model_facts_for(chosen, "native")
    served_chat_template(chosen, "native")
    assert {path: path.stat().st_mtime_ns for path in store.rglob("*")} == before


def test_a_gguf_is_sized_before_it_is_prepared_as_after(store: Path) -> None:
    """The preflight sizes a learner's GGUF from its header: the counts the prepared checkpoint has (the bundled
    model's checkpoint is the one prepared from the same GGUF)."""
    facts = model_facts_for(settings(MODEL_PATH="ollama:smollm2:135m"), "native")
    prepared = load_model_facts(MODEL_DIR)
    assert facts is not None and facts.name == "smollm2:135m"
    assert (facts.num_layers, facts.num_kv_heads, facts.head_dim, facts.num_params) == (
        prepared.num_layers,
        prepared.num_kv_heads,
        prepared.head_dim,
        prepared.num_params,
    )
    assert facts.num_projection_params == prepared.num_projection_params  # what int8 would narrow


def test_the_chat_template_served_is_the_gguf_s_jinja_not_ollama_s_go_template(store: Path) -> None:
    template = served_chat_template(settings(MODEL_PATH="ollama:smollm2:135m"), "native")
    assert template is not None and template.chatml and "{%" in template.text
    assert template.text != OLLAMA_TEMPLATE


def test_a_gguf_transformers_cannot_load_is_refused_in_one_line_saying_what_works(tmp_path: Path) -> None:
    import gguf
    import numpy

    path = tmp_path / "rwkv.gguf"
    writer = gguf.GGUFWriter(str(path), "rwkv6")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", numpy.zeros((4, 8), dtype=numpy.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(SettingsError) as refused:
        checked_source(settings(MODEL_PATH=str(path)))
    line = str(refused.value)
    assert "\n" not in line and "'rwkv6'" in line and "ENGINES=llamacpp" in line and "Hugging Face folder" in line


def test_the_client_asks_for_the_one_model_served_when_model_path_names_it() -> None:
    """MODEL_NAME in .env may still be SmolLM2's while the engine serves the learner's model under its own name."""
    assert Endpoint.from_env({"MODEL_PATH": "ollama:smollm2:135m", "MODEL_NAME": BUNDLED_MODEL_NAME}).model == ""
    assert Endpoint.from_env({"MODEL_PATH": "x", "MODEL": "smollm2:135m"}).model == "smollm2:135m"


def test_a_learners_model_that_does_not_fit_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    """A 70B-parameter folder (its config.json alone: the preflight counts its parameters from it) on this machine:
    up.sh refuses with the numbers before installing or starting anything."""
    config = json.loads((ROOT / "labs" / "sizing" / "examples" / "llama-3.1-8b-config.json").read_text())
    config |= {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64}
    folder = tmp_path / "llama-70b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    up = run_script("up.sh", kit_env(MODEL_PATH=str(folder), VLLM_PORT=str(free_port())), timeout_s=120)
    errors = [line for line in up.stderr.splitlines() if line.strip()]
    assert up.returncode == 2, up.stdout + up.stderr
    assert len(errors) == 1 and errors[0].startswith("error: "), errors
    assert errors[0].startswith("error: llama-70b does not fit this machine: the available RAM"), errors[0]
    assert "weights 131" in errors[0] and "(llama-70b, bfloat16)" in errors[0] and "smaller model" in errors[0]
    assert "Starting" not in up.stdout and "Installing" not in up.stdout


def test_the_pages_sizing_commands_run_as_written() -> None:
    """labs/your-model.md's "Will it fit?": the sizing from a config.json alone, per dtype."""
    for command in doc_commands("labs/your-model.md")[5:]:
        ran = run_doc(command, kit_env(), timeout_s=60)
        assert ran.returncode == 0 and "Under a 24g memory cap: weights" in ran.stdout, ran.stdout + ran.stderr


def test_runtime_auto_serves_a_learners_model_natively_without_asking_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Docker tracks load MODEL_NAME from the hub: with MODEL_PATH set, auto is the native runtime."""
    from serve.engines import runtimes

    monkeypatch.setattr(runtimes, "recorded", lambda settings: None)
    monkeypatch.setattr(runtimes, "find_docker", lambda: pytest.fail("Docker was asked"))
    picked = runtimes.select(settings(RUNTIME="auto", MODEL_PATH=str(MODEL_DIR)))
    assert picked.name == "native" and "MODEL_PATH" in picked.picked_because


def test_a_hub_model_that_does_not_fit_is_refused_from_its_config_before_its_weights_come(tmp_path: Path) -> None:
    """MODEL_NAME from a stand-in hub (HF_ENDPOINT): the preflight fetches config.json alone and refuses in one line."""
    config = json.loads((ROOT / "labs" / "sizing" / "examples" / "llama-3.1-8b-config.json").read_text())
    config |= {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64}
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "config.json").write_text(json.dumps(config))
    (repo / "model.safetensors").write_bytes(b"never asked for")
    cache = tmp_path / "cache"
    with hub_standin("learner/big", repo) as (url, requests):
        up = run_script(
            "up.sh",
            kit_env(MODEL_NAME="learner/big", HF_ENDPOINT=url, XDG_CACHE_HOME=str(cache), VLLM_PORT=str(free_port())),
            timeout_s=300,
        )
    errors = [line for line in up.stderr.splitlines() if line.strip()]
    assert up.returncode == 2, up.stdout + up.stderr
    assert len(errors) == 1 and errors[0].startswith("error: learner/big does not fit this machine"), errors
    assert not any("model.safetensors" in request for request in requests), requests
    assert "Starting" not in up.stdout
