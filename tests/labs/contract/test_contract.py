"""labs/contract.md: the page's commands run against the kit's four engines (vLLM and llama.cpp from the session,
a llama-server the page's own up.sh starts, the teaching engine's server in the vLLM venv), and each engine's
matrix is the one the page shows: an engine that changes behaviour (an upgrade) fails here naming the check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labs.contract.registry import CHECKS
from tests.conftest import Server, free_port
from tests.support.docs import doc_commands, doc_examples, run_doc, run_page, shows

PAGE = "labs/contract.md"
LLAMA_SERVER_PORT = 8089
CONTRACT = "-m labs.contract"


def shown_matrix() -> tuple[str, dict[str, dict[str, str]]]:
    """The page's contract command and its matrix, check -> engine -> mark, as the ```text block shows them."""
    ((command, lines),) = [(command, lines) for command, lines in doc_examples(PAGE).items() if CONTRACT in command]
    engines = lines[0].split()[1:]
    return command, {line.split()[0]: dict(zip(engines, line.split()[1:], strict=True)) for line in lines[1:]}


def test_the_page_shows_every_check_of_the_registry_in_its_order() -> None:
    _, matrix = shown_matrix()
    assert list(matrix) == list(CHECKS)


@pytest.mark.server
@pytest.mark.slow
def test_lab_page_commands_run_and_each_engine_answers_as_the_page_says(
    vllm_server: Server, llamacpp_server: Server, tmp_path: Path
) -> None:
    commands = doc_commands(PAGE)
    contract_command, expected = shown_matrix()
    assert contract_command in commands
    llama_server_port = free_port()
    ports = {8009: vllm_server.port, 11434: llamacpp_server.port, LLAMA_SERVER_PORT: llama_server_port}
    env = {
        **vllm_server.client_env(),
        "LLAMACPP_PORT": str(llamacpp_server.port),
        "LLAMA_SERVER_PORT": str(llama_server_port),
    }

    def sized(index: int, command: str, actual: str) -> str:
        return f"{actual} --out {tmp_path}" if CONTRACT in command else actual

    try:
        outputs = run_page(commands, env, ports, sized)
    finally:
        # only the llama-server the page's up.sh started: vLLM and llama.cpp are the session's
        run_doc("ENGINES=llamaserver bash down.sh", env, timeout_s=120)

    up = next(command for command in commands if command.endswith("bash up.sh"))
    assert outputs[up].stdout.count("already up") == 2, outputs[up].stdout  # the session's vLLM and llama.cpp
    records = json.loads((tmp_path / "contract.json").read_text())["records"]
    marks = {"pass": "✔", "fail": "✘"}
    changed = [
        f"{record['engine']} {record['check']}: the page says {expected[record['check']][record['engine']]}, "
        f"got {marks.get(record['verdict'], record['verdict'])} ({record['evidence']})"
        for record in records
        if marks.get(record["verdict"], record["verdict"]) != expected[record["check"]][record["engine"]]
    ]
    assert changed == [], "\n".join(changed)
    assert len(records) == len(CHECKS) * len(next(iter(expected.values())))
    output = outputs[contract_command].stdout
    assert shows(output, doc_examples(PAGE)[contract_command]) == []
    assert (tmp_path / "report.html").read_text().count("<tr>") > len(CHECKS)


def test_bad_input_gets_one_line_naming_the_fix(tmp_path: Path) -> None:
    unreachable = run_doc(
        f".venv/bin/python -m labs.contract --endpoint gone=http://127.0.0.1:{free_port()}/v1@m", None, timeout_s=60
    )
    assert unreachable.returncode == 2 and "cannot reach" in unreachable.stderr and "--endpoint" in unreachable.stderr
    malformed = run_doc(".venv/bin/python -m labs.contract --endpoint 127.0.0.1:11434", None, timeout_s=60)
    assert malformed.returncode == 2 and "write NAME=URL[@MODEL], e.g. ollama=" in malformed.stderr, malformed.stderr
    assert "Traceback" not in unreachable.stderr
    unknown = run_doc(".venv/bin/python -m labs.contract --checks nope", None, timeout_s=60)
    assert unknown.returncode == 2 and "unknown check(s) nope" in unknown.stderr and "models" in unknown.stderr
