"""The README's commands, run against the real server the harness started, each checked for what it prints."""

from __future__ import annotations

import json
import re
import shlex

import httpx
import pytest

from client.__main__ import parse_args
from serve.processes.metrics import scrape
from tests.conftest import MODEL, ROOT, Server, free_port
from tests.support.docs import doc_commands, is_docker_command, retarget, run_doc
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.server, pytest.mark.slow]
README = doc_commands("README.md")
CLIENT = ".venv/bin/python -m client"
TOUR = "-m labs.tour"
DEFAULT_MAX_TOKENS = 256  # the client's --max-tokens default
# what `--usage` prints after a streamed answer (client/chat.py, Reply.usage_line)
USAGE_LINE = re.compile(
    r"usage: (\d+) prompt tokens, (\d+) answer tokens in [\d.]+ s \([\d.]+ tok/s\), "
    r"first token after [\d.]+ s"
)


def answer_only(stdout: str) -> str:
    """The answer of a client command that prints one answer and nothing else: its text, then one newline."""
    assert stdout.endswith("\n") and stdout.strip(), repr(stdout)
    assert not [line for line in stdout.splitlines() if line.startswith(("usage:", "error:"))], stdout
    return stdout[:-1]


def curl_body(command: str) -> dict:
    """The JSON a documented curl command sends (its -d argument)."""
    words = shlex.split(command)
    return json.loads(words[words.index("-d") + 1])


def test_readme_opens_with_the_two_commands_and_ci_runs_the_second() -> None:
    assert README[:2] == ["bash up.sh", "bash tests/run.sh"]
    assert "bash tests/run.sh" in (ROOT / ".ci" / "run").read_text()


def test_readme_talk_commands(vllm_server: Server) -> None:
    """Each prints what the README says it does: curl the engine's JSON answer within its max_tokens; the client an
    answer and nothing else; `--usage` the answer, then the engine's token counts (the prompt counted as curl's
    same question was); `--no-stream --temperature 0` the very answer the engine gives that request."""
    talk = [
        command
        for command in README[2:]
        if "VLLM_PORT=8010" not in command
        and ":11434" not in command
        and TOUR not in command  # tests/labs/tour/test_tour.py runs the tour's commands
        and not is_docker_command(command)
    ]
    curls = [command for command in talk if command.startswith("curl")]
    usages = [command for command in talk if command.endswith(f"| {CLIENT} --usage")]
    whole = [command for command in talk if command.startswith(f"{CLIENT} --no-stream")]
    plain = [command for command in talk if command not in curls + usages + whole]
    assert len(curls) == len(usages) == len(whole) == 1 and plain == [f'{CLIENT} "Say OK."'], talk
    outputs = {}
    for command in talk:
        result = run_doc(retarget(command, {8009: vllm_server.port}), vllm_server.client_env(), timeout_s=120)
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        outputs[command] = result.stdout

    (curl,) = curls
    sent, body = curl_body(curl), json.loads(outputs[curl])
    choice = body["choices"][0]
    assert body["object"] == "chat.completion" and body["model"] == MODEL == sent["model"], body
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"].strip(), body
    assert choice["finish_reason"] in ("stop", "length"), body
    assert 1 <= body["usage"]["completion_tokens"] <= sent["max_tokens"], body

    answer_only(outputs[plain[0]])

    (usage,) = usages
    *answer, last = outputs[usage].rstrip("\n").split("\n")
    counted = USAGE_LINE.fullmatch(last)
    assert counted and "".join(answer).strip(), outputs[usage]
    prompt_tokens, answer_tokens = (int(group) for group in counted.groups())
    assert 1 <= answer_tokens <= DEFAULT_MAX_TOKENS, last
    piped = shlex.split(usage)[1]  # echo "QUESTION" | ...
    assert sent["messages"] == [{"role": "user", "content": piped}], (curl, usage)  # the same question, so:
    assert prompt_tokens == body["usage"]["prompt_tokens"], (last, body["usage"])

    (no_stream,) = whole
    args = parse_args(shlex.split(no_stream)[3:])  # the client's own reading of the README's flags
    assert args.temperature == 0 and not args.usage, no_stream
    messages = [{"role": "system", "content": args.system}] if args.system else []
    reference = httpx.post(
        f"{vllm_server.api_url}/chat/completions",
        timeout=120,
        json={
            "model": MODEL,
            "max_tokens": args.max_tokens,
            "temperature": args.temperature,
            "messages": [*messages, {"role": "user", "content": args.prompt}],
        },
    ).json()
    assert reference["usage"]["completion_tokens"] <= args.max_tokens, reference
    # temperature 0 gives the same answer twice (labs/contract's temperature_zero, passed by this vLLM)
    assert answer_only(outputs[no_stream]) == reference["choices"][0]["message"]["content"], reference


def test_readme_client_switch_to_the_ollama_class_engine(llamacpp_server: Server) -> None:
    """The two variables alone move the client to the llama.cpp server: vLLM serves no `smollm2:135m` (it would
    refuse the name), so an answer came from the engine the README names."""
    switch = [command for command in README if ":11434" in command]
    assert switch == [f'OPENAI_BASE_URL=http://127.0.0.1:11434/v1 MODEL=smollm2:135m {CLIENT} "Say OK."'], switch
    for command in switch:
        result = run_doc(retarget(command, {11434: llamacpp_server.port}), llamacpp_server.env, timeout_s=120)
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        answer_only(result.stdout)


def test_readme_port_override_retargets_up_client_and_down(vllm_server: Server) -> None:
    """VLLM_PORT moves all three: up.sh serves there, the client's one request is answered by the engine there
    (its /metrics counts it), and down.sh frees that port."""
    commands = [command for command in README if "VLLM_PORT=8010" in command]
    assert [command.split()[-1] for command in commands][0::2] == ["up.sh", "down.sh"] and len(commands) == 3
    port = free_port()
    env = {**vllm_server.env, "ENFORCE_EAGER": "true"}
    env.pop("VLLM_PORT")
    engine = f"http://127.0.0.1:{port}"

    def run(command: str) -> str:
        actual = retarget(command, {8010: port})
        result = run_doc(actual, env)
        assert result.returncode == 0, f"{actual}\n{result.stdout}\n{result.stderr}"
        return result.stdout

    try:
        up = run(commands[0])
        before = scrape(engine).requests_done_total
        client = run(commands[1])
        wait_until(lambda: scrape(engine).requests_done_total > before, 10, f"{engine}/metrics to count the answer")
        served = scrape(engine).requests_done_total - before
        down = run(commands[2])
    finally:
        run_doc(f"VLLM_PORT={port} bash down.sh", env, timeout_s=120)
    assert f"{engine}/v1" in up, up
    answer_only(client)
    assert served == 1, f"the engine on port {port} finished {served} requests during `{commands[1]}`"
    assert f"port {port} is free" in down, down
