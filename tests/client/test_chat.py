"""The client as `ollama run` is used: a prompt piped in, and a chat in a real terminal (tmux) with the real vLLM."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import ROOT, Server, kit_env
from tests.support.terminal import terminal

CLIENT = [str(ROOT / ".venv" / "bin" / "python"), "-m", "client", "--temperature", "0"]
USAGE = re.compile(
    r"usage: (\d+) prompt tokens, (\d+) answer tokens in [\d.]+ s \([\d.]+ tok/s\), first token after [\d.]+ s"
)
START_S, ANSWER_S = 60, 120
LONG_QUESTION = "Write a long story about a dragon."


def at_prompt(text: str) -> bool:
    return text.rstrip().endswith(">>>")


def test_a_piped_prompt_is_the_question(vllm_server: Server) -> None:
    result = subprocess.run(
        [*CLIENT, "--max-tokens", "16", "--usage"],
        input="Say OK.\n",
        capture_output=True,
        text=True,
        timeout=ANSWER_S,
        cwd=ROOT,
        env=vllm_server.client_env(),
    )
    assert result.returncode == 0, result.stderr
    *answer, usage = result.stdout.strip().splitlines()
    assert "".join(answer).strip() and USAGE.fullmatch(usage), result.stdout


def test_an_empty_pipe_is_one_line_naming_the_fix() -> None:
    result = subprocess.run(CLIENT, input="", capture_output=True, text=True, timeout=60, cwd=ROOT, env=kit_env())
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "standard input was empty" in result.stderr and "Traceback" not in result.stderr


def test_a_chat_keeps_the_history_and_shows_usage_on_request(vllm_server: Server) -> None:
    with terminal([*CLIENT, "--max-tokens", "12"], vllm_server.client_env(), ROOT) as term:
        term.wait_for(at_prompt, START_S, "the chat's prompt")
        term.type_line("/usage")
        term.wait_for(lambda text: "usage after each answer: on" in text and at_prompt(text), 10, "/usage on")
        term.type_line("Name a color.")
        first = term.wait_for(lambda text: len(USAGE.findall(text)) == 1 and at_prompt(text), ANSWER_S, "an answer")
        term.type_line("Name another one.")
        both = term.wait_for(lambda text: len(USAGE.findall(text)) == 2 and at_prompt(text), ANSWER_S, "a 2nd answer")
        term.type_line("/bye")
        assert term.exit_code(10) == 0
    (prompt_1, answer_1), (prompt_2, _) = [(int(a), int(b)) for a, b in USAGE.findall(both)]
    assert USAGE.findall(first) == USAGE.findall(both)[:1]  # one usage line per answer, after it
    # the second turn sent the first question and its answer along: its prompt holds them both
    assert prompt_2 >= prompt_1 + answer_1, both


def test_ctrl_c_stops_the_answer_not_the_session_and_ctrl_d_leaves(vllm_server: Server) -> None:
    """ "(stopped" is printed only when Ctrl-C lands while the answer streams (after it, Ctrl-C is at the prompt).
    Whether vLLM then stops generating is not checked: on a loaded 2-core machine its API server delivers the
    first chunks after the engine has generated the whole answer, so the token count would test the load."""
    with terminal([*CLIENT, "--max-tokens", "1000"], vllm_server.client_env(), ROOT) as term:
        term.wait_for(at_prompt, START_S, "the chat's prompt")
        term.type_line(LONG_QUESTION)  # ~1,000 tokens at temperature 0 (it stops at max_tokens)
        term.wait_for(lambda text: text.split(LONG_QUESTION)[-1].split(), ANSWER_S, "the answer streaming")
        term.send("C-c")
        stopped = term.wait_for(lambda text: "(stopped" in text and at_prompt(text), 30, "the stop")
        term.send("-l", "a line not sent")
        term.send("C-c")  # at the prompt: a fresh line, the session goes on
        term.wait_for(lambda text: "^C (Ctrl-D or /bye leaves)" in text and at_prompt(text), 30, "a new line")
        term.type_line("Say OK.")
        term.wait_for(
            lambda text: text.split("Say OK.")[-1].strip() != ">>>" and at_prompt(text),
            ANSWER_S,
            "an answer after the stop",
        )
        term.send("C-d")
        assert term.exit_code(30) == 0
    assert "Traceback" not in stopped
