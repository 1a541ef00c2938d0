"""The learner's own model, served for real by vLLM and llama.cpp alike (issue 53; labs/your-model.md): from their
Ollama store, a Hugging Face folder, a GGUF file, and the hub.

The models and the store and the hub are STAND-INS written by the tests (tests/support/learner_models.py,
tests/support/hub_standin.py): no other real weights and no model hub are reachable here. The engines are real, started
by `bash up.sh` as a learner starts them, eager (ENFORCE_EAGER=true: the compile is tested elsewhere, and each form
would compile a model of its own).

What "the same model on both engines" is checked as: the same name on both; llama.cpp's parameter count and trained
context (its /v1/models `meta`, from the GGUF it loaded) equal to the sizing's of the checkpoint vLLM loaded;
and for SmolLM2 from the Ollama store, the same greedy first token on both. A random-weight model's top logits are
too close for a 16-bit and a float32 copy to be held to the same token, so the tiny model is held to the first two.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from serve.config.model import int8_dir, model_facts_for, served_weights_dir
from serve.config.model_source import model_source
from serve.config.settings import Settings
from serve.config.sizing import GiB, kv_pool
from serve.install.llamacpp_venv import gguf_path
from serve.processes import run_record
from serve.processes.health import kv_cache_report
from serve.processes.local_server import LOG_DIR
from tests.conftest import Server, bring_up, free_port, kit_env, stop_server
from tests.support.docs import doc_commands, retarget, run_doc
from tests.support.hub_standin import hub_standin
from tests.support.learner_models import ollama_store, tiny_model

pytestmark = [pytest.mark.server, pytest.mark.slow]

PROMPT = "The capital of France is"
PAGE = "labs/your-model.md"
RENAMED = "kit-test/my-model"  # a MODEL_NAME of the learner's own for a model file of theirs


def both_engines(what: str, **env: str) -> tuple[Server, Server]:
    """`ENGINES=vllm,llamacpp bash up.sh` with `env`: vLLM and llama.cpp, each on a free port."""
    vllm_port, llamacpp_port = free_port(), free_port()
    settings = kit_env(
        ENGINES="vllm,llamacpp",
        VLLM_PORT=str(vllm_port),
        LLAMACPP_PORT=str(llamacpp_port),
        ENFORCE_EAGER="true",
        **env,
    )
    vllm = bring_up(vllm_port, settings, f"ENGINES=vllm,llamacpp up.sh ({what})")
    return vllm, Server(llamacpp_port, settings, vllm.up_output)


def models(server: Server) -> list[dict]:
    return httpx.get(f"{server.api_url}/models", timeout=10).json()["data"]


def completion(server: Server, name: str, count: int = 1) -> dict:
    answer = httpx.post(
        f"{server.api_url}/completions",
        json={"model": name, "prompt": PROMPT, "max_tokens": count, "temperature": 0},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def first_tokens(server: Server, name: str, count: int = 1) -> str:
    return completion(server, name, count)["choices"][0]["text"]


def check_served_alike(vllm: Server, llamacpp: Server, name: str) -> None:
    """Both answer under `name`; llama.cpp's GGUF holds as many parameters as vLLM's checkpoint (the sizing's
    count); vLLM's KV cache is the sizing's prediction, to the token."""
    settings = Settings.from_env(vllm.env)
    facts = model_facts_for(settings, "native")
    assert facts is not None
    record = run_record.read(vllm.port)
    plan = record.plan if record is not None else None  # what up resolved and started vLLM with
    assert plan is not None
    vllm_models, llamacpp_models = models(vllm), models(llamacpp)
    assert [model["id"] for model in vllm_models] == [name]
    # the source's checkpoint (not SmolLM2's), or its int8 one where QUANTIZATION=auto's check held
    assert vllm_models[0]["root"] == str(served_weights_dir(settings, plan.quantization))
    assert vllm_models[0]["max_model_len"] == settings.max_model_len
    assert [model["id"] for model in llamacpp_models] == [name]
    meta = llamacpp_models[0]["meta"]
    assert meta["n_params"] == facts.num_params
    assert meta["n_ctx_train"] == facts.max_position_embeddings  # the model's own context, as vLLM's sizing reads it
    assert meta["n_ctx"] == settings.max_model_len  # one slot: a sequence of MAX_MODEL_LEN, as vLLM serves
    served_gguf = httpx.get(f"{llamacpp.base_url}/props", timeout=10).json()["model_path"]
    assert served_gguf == str(model_source(settings).served_gguf)
    log = (LOG_DIR / f"vllm-{vllm.port}.log").read_text(errors="replace")
    report = kv_cache_report(log)
    assert plan.kv_cache_space_gib is not None and report is not None
    assert report.tokens == kv_pool(facts, plan.dtype, plan.kv_cache_space_gib * GiB, plan.kv_block_size).num_tokens
    for server in (vllm, llamacpp):  # a random model's tokens may decode to nothing: counted, not read
        assert completion(server, name, 4)["usage"]["completion_tokens"] >= 1, server.api_url


def stop(vllm: Server) -> None:
    stop_server(vllm)  # down.sh with the same ENGINES stops both


@pytest.fixture(scope="module")
def ollama_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in Ollama store holding smollm2:135m: the bundled GGUF as its blob."""
    store = tmp_path_factory.mktemp("ollama") / "models"
    ollama_store(store, gguf_path())
    return store


def test_the_pages_ollama_commands_serve_it_on_both_engines_under_its_ollama_name(
    ollama_models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """labs/your-model.md's commands as written (ports retargeted): MODEL_PATH=ollama:smollm2:135m ENGINES=vllm,llamacpp
    bash up.sh; the client keeps MODEL=smollm2:135m and changes the base URL alone; the compare lab runs on it; their
    store is left as it was."""
    before = {path: path.stat().st_mtime_ns for path in ollama_models.rglob("*")}
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama_models))  # where this process, too, finds the store
    vllm_port, llamacpp_port = free_port(), free_port()
    env = kit_env(
        VLLM_PORT=str(vllm_port),
        LLAMACPP_PORT=str(llamacpp_port),
        OLLAMA_MODELS=str(ollama_models),
        ENFORCE_EAGER="true",
    )
    up, *talks, compare, down = [
        retarget(line, {8009: vllm_port, 11434: llamacpp_port}) for line in doc_commands(PAGE)[:5]
    ]
    started = run_doc(up, env)
    served = {**env, "MODEL_PATH": "ollama:smollm2:135m", "ENGINES": "vllm,llamacpp"}
    vllm, llamacpp = Server(vllm_port, served, started.stdout), Server(llamacpp_port, served, started.stdout)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        for talk in talks:
            said = run_doc(talk, env, timeout_s=120)
            assert said.returncode == 0 and said.stdout.strip(), said.stdout + said.stderr
        check_served_alike(vllm, llamacpp, "smollm2:135m")
        plan = run_record.read(vllm_port).plan  # type: ignore[union-attr]
        assert plan is not None and plan.quantization == "int8", plan  # QUANTIZATION=auto: its check held
        assert "as int8" in plan.quantization_reason and "within 1%" in plan.quantization_reason
        assert first_tokens(vllm, "smollm2:135m") == first_tokens(llamacpp, "smollm2:135m")
        compared = run_doc(compare, env, timeout_s=600)
    finally:
        stopped = run_doc(down, env, timeout_s=120)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "smollm2:135m" in compared.stdout and "HuggingFaceTB/SmolLM2-135M-Instruct" not in compared.stdout
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert {path: path.stat().st_mtime_ns for path in ollama_models.rglob("*")} == before


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A random-weight tiny StableLM folder; what the kit prepares from it is removed after."""
    folder = tiny_model(tmp_path_factory.mktemp("learner") / "tiny-stablelm")
    yield folder
    prepared = model_source(Settings.from_env({"MODEL_PATH": str(folder)})).served_gguf
    if prepared is not None:
        prepared.unlink(missing_ok=True)
    shutil.rmtree(int8_dir(folder), ignore_errors=True)  # QUANTIZATION=auto's check made one


def test_a_folder_its_gguf_and_the_hub_serve_on_both_engines(tiny: Path, tmp_path: Path) -> None:
    """The same tiny model three ways: its folder (llama.cpp gets the GGUF llama.cpp's converter writes), that GGUF
    as a file under a MODEL_NAME of the learner's own (vLLM gets the checkpoint transformers prepares from it), and
    the hub's copy (downloaded from the stand-in with huggingface_hub). The folder is served as QUANTIZATION=auto
    decides; the other two in float, as the int8 check and quantizing would only be the folder's again."""
    vllm, llamacpp = both_engines("folder", MODEL_PATH=str(tiny))
    try:
        check_served_alike(vllm, llamacpp, "tiny-stablelm")
    finally:
        stop(vllm)
    assert "Converting tiny-stablelm" in vllm.up_output
    converted = model_source(Settings.from_env({"MODEL_PATH": str(tiny)})).served_gguf
    assert converted is not None and converted.is_file()

    gguf = tmp_path / "tiny-stablelm.gguf"
    shutil.copyfile(converted, gguf)
    # under a MODEL_NAME of the learner's choosing, in float: the folder above was served in int8 where
    # QUANTIZATION=auto's check held, and the checkpoint prepared from the GGUF is the one vLLM loads
    vllm, llamacpp = both_engines("gguf", MODEL_PATH=str(gguf), MODEL_NAME=RENAMED, QUANTIZATION="none")
    try:
        check_served_alike(vllm, llamacpp, RENAMED)  # vLLM's root: the folder prepared from the GGUF, in float
    finally:
        stop(vllm)
        shutil.rmtree(model_source(Settings.from_env({"MODEL_PATH": str(gguf)})).folder, ignore_errors=True)
    assert f"Preparing {RENAMED} for vLLM from the GGUF {gguf}" in vllm.up_output

    with hub_standin("learner/tiny-stablelm", tiny) as (url, requests):
        vllm, llamacpp = both_engines("hub", MODEL_NAME="learner/tiny-stablelm", HF_ENDPOINT=url, QUANTIZATION="none")
        try:
            check_served_alike(vllm, llamacpp, "learner/tiny-stablelm")
        finally:
            stop(vllm)
            hub = model_source(Settings.from_env({"MODEL_NAME": "learner/tiny-stablelm"}))
            if hub.served_gguf is not None:
                hub.served_gguf.unlink(missing_ok=True)
            shutil.rmtree(hub.folder, ignore_errors=True)
    assert any(request.startswith("GET /learner/tiny-stablelm/resolve/") for request in requests)
