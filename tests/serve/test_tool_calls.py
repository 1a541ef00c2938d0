"""Tool calls on the kit's vLLM: how TOOL_CALL_PARSER resolves (serve/config/plan.py), the kit's template for a
model whose own teaches no tool format (serve/config/chat_template.py), and the four requests an agent sends,
through the stock OpenAI SDK, against the session's real vLLM."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from openai import OpenAI

from serve.config import chat_template
from serve.config.chat_template import (
    BUNDLED_CHAT_TEMPLATE,
    BUNDLED_TOOLS_TEMPLATE,
    HERMES,
    ChatTemplate,
    bundled_chat_template,
    compose,
    composed_template_file,
    model_chat_template,
)
from serve.config.machine import detect
from serve.config.model import MODEL_DIR
from serve.config.plan import resolve_tool_calls
from serve.config.settings import Settings
from serve.config.vllm_flags import TOOL_STRICT_LEVEL_ADDED_IN
from serve.engines.tracks import CPU, GPU, container_command, plan_for_container
from serve.processes import run_record
from tests.conftest import MODEL, ROOT, Server
from ui.values import SettingsError

KIT_VERSION = (0, 32)
IMAGE_VERSION = (0, 9)  # openEuler's CPU image
CITY_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER_TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "description": "The weather in a city now.", "parameters": CITY_SCHEMA},
}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
ANSWER_TOKENS = 48
HERMES_OWN = ChatTemplate(
    "{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}{% if tools %}<tool_call>{% endif %}"
)
LLAMA_OWN = ChatTemplate("{{ '<|python_tag|>' if tools }}{% for m in messages %}{{ m.content }}{% endfor %}")


def tool_calls(**env: str) -> tuple[str | None, bool, str]:
    settings = Settings.from_env(env)
    decided = resolve_tool_calls(settings, bundled_chat_template(), KIT_VERSION)
    return decided.parser, decided.kit_template, decided.reason


def test_auto_teaches_the_bundled_model_hermes_with_the_kits_turns() -> None:
    parser, kit_template, reason = tool_calls()
    assert (parser, kit_template) == (HERMES, True)
    assert "teaches no tool-call format" in reason and "hermes_tools_chatml.jinja" in reason


def test_auto_keeps_a_models_own_tool_format() -> None:
    settings = Settings.from_env({})
    hermes = resolve_tool_calls(settings, HERMES_OWN, KIT_VERSION)
    assert (hermes.parser, hermes.kit_template) == (HERMES, False)
    llama = resolve_tool_calls(settings, LLAMA_OWN, KIT_VERSION)
    assert (llama.parser, llama.kit_template) == ("llama3_json", False) and "own template teaches" in llama.reason


def test_a_template_not_known_here_gets_hermes_and_says_what_works() -> None:
    decided = resolve_tool_calls(Settings.from_env({"MODEL_NAME": "Qwen/Qwen2.5-0.5B-Instruct"}), None, KIT_VERSION)
    assert (decided.parser, decided.kit_template) == (HERMES, False)
    assert "not readable here" in decided.reason and "tool_choice=required work" in decided.reason


def test_none_and_extra_args_turn_the_kits_flags_off() -> None:
    assert tool_calls(TOOL_CALL_PARSER="none")[:2] == (None, False)
    extra = tool_calls(VLLM_EXTRA_ARGS="--enable-auto-tool-choice --tool-call-parser=pythonic")
    assert extra == (None, False, "set in VLLM_EXTRA_ARGS")
    own_template = tool_calls(VLLM_EXTRA_ARGS="--chat-template my.jinja")
    assert own_template[:2] == (HERMES, False)  # the parser still, the user's template


def test_a_named_parser_is_taken_and_a_bad_one_names_the_fix() -> None:
    assert tool_calls(TOOL_CALL_PARSER="pythonic")[:2] == ("pythonic", False)
    with pytest.raises(SettingsError, match="TOOL_CALL_PARSER=.*use auto .*none .*hermes"):
        Settings.from_env({"TOOL_CALL_PARSER": "Hermes!"})


def test_the_cpu_images_vllm_serves_no_hermes_calls_for_a_model_without_the_tags() -> None:
    """vLLM 0.9.1's hermes parser raises at each request when the vocabulary lacks <tool_call>: the kit does not
    turn on what would answer every tool request with an error."""
    decided = resolve_tool_calls(Settings.from_env({}), bundled_chat_template(), IMAGE_VERSION)
    assert decided.parser is None and "needs <tool_call> in the model's vocabulary" in decided.reason
    assert resolve_tool_calls(Settings.from_env({}), HERMES_OWN, IMAGE_VERSION).parser == HERMES


def test_the_kits_files_are_what_they_claim() -> None:
    """The bundled template's copy is the prepared model's own, and the kit's composed file is compose() of it."""
    assert BUNDLED_TOOLS_TEMPLATE.read_text() == compose(bundled_chat_template(), HERMES)
    assert composed_template_file(bundled_chat_template(), HERMES) == BUNDLED_TOOLS_TEMPLATE
    prepared = model_chat_template(MODEL_DIR)
    if prepared is None:
        pytest.skip(f"the bundled model is not prepared in {MODEL_DIR} (python -m serve install prepares it)")
    assert prepared.text == BUNDLED_CHAT_TEMPLATE.read_text()


def test_a_model_path_template_is_composed_into_a_file_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chat_template, "COMPOSED_DIR", tmp_path / "composed")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "<|im_start|>{{ messages }}"}))
    own = model_chat_template(tmp_path)
    assert own is not None and own.tool_format is None and own.chatml
    written = composed_template_file(own, HERMES)
    assert written.parent == tmp_path / "composed" and written.read_text() == compose(own, HERMES)
    assert composed_template_file(own, HERMES) == written  # once


RENDER = """
import json, sys
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
kit = open(sys.argv[2]).read()
conversations = json.loads(sys.argv[3])
print(json.dumps([
    [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True, chat_template=t) for t in (None, kit)]
    for c in conversations
]))
"""
WITHOUT_TOOLS = [
    [{"role": "user", "content": "Say OK."}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Bye"},
    ],
]


@pytest.mark.slow
def test_without_tools_the_kits_template_renders_exactly_the_models_own() -> None:
    """What makes tool calls cost nothing on other answers: the same prompt, token for token (rendered by
    transformers in the vLLM venv, as vLLM renders it)."""
    python = ROOT / ".kit" / "vllm" / "bin" / "python"
    if not python.exists() or not (MODEL_DIR / "tokenizer.json").exists():
        pytest.skip("needs the vLLM venv and the prepared model (python -m serve install)")
    rendered = subprocess.run(
        [str(python), "-c", RENDER, str(MODEL_DIR), str(BUNDLED_TOOLS_TEMPLATE), json.dumps(WITHOUT_TOOLS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    pairs = json.loads(rendered.stdout)
    assert len(pairs) == len(WITHOUT_TOOLS) and all(own == kit for own, kit in pairs), pairs


def sdk(server: Server) -> OpenAI:
    return OpenAI(base_url=server.api_url, api_key="none", max_retries=0, timeout=120)


def weather_call(server: Server, tool_choice: object) -> tuple[object, dict]:
    answer = sdk(server).chat.completions.create(
        model=MODEL, messages=QUESTION, tools=[WEATHER_TOOL], tool_choice=tool_choice, temperature=0, max_tokens=64
    )
    (call,) = answer.choices[0].message.tool_calls or [None]
    assert call is not None, f"no tool call for tool_choice={tool_choice}: {answer.choices[0].message}"
    assert call.function.name == "get_weather" and call.id
    arguments = json.loads(call.function.arguments)
    assert isinstance(arguments, dict) and isinstance(arguments.get("city"), str), arguments
    return call, arguments


@pytest.mark.parametrize("tool_choice", [NAMED, "required"], ids=["named", "required"])
def test_a_named_or_required_choice_returns_a_call_whose_arguments_fit_the_schema(
    vllm_server: Server, tool_choice: object
) -> None:
    weather_call(vllm_server, tool_choice)


def test_auto_answers_text_or_a_call_and_never_a_400(vllm_server: Server) -> None:
    answer = sdk(vllm_server).chat.completions.create(
        model=MODEL, messages=QUESTION, tools=[WEATHER_TOOL], tool_choice="auto", temperature=0, max_tokens=64
    )
    message = answer.choices[0].message
    assert message.tool_calls or message.content, message
    for call in message.tool_calls or []:
        json.loads(call.function.arguments)


def test_the_tools_result_turn_gets_an_answer(vllm_server: Server) -> None:
    call, _ = weather_call(vllm_server, NAMED)
    turns = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_none=True)]},
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 degrees Celsius."},
    ]
    answer = sdk(vllm_server).chat.completions.create(
        model=MODEL, messages=turns, tools=[WEATHER_TOOL], temperature=0, max_tokens=ANSWER_TOKENS
    )
    choice = answer.choices[0]
    assert choice.message.content and choice.finish_reason in ("stop", "length"), choice


def test_a_streamed_tool_call_arrives_as_openai_deltas(vllm_server: Server) -> None:
    chunks = sdk(vllm_server).chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        tools=[WEATHER_TOOL],
        tool_choice=NAMED,
        temperature=0,
        max_tokens=64,
        stream=True,
    )
    names, arguments, ids, reasons = [], "", [], []
    for chunk in chunks:
        for choice in chunk.choices:
            reasons.append(choice.finish_reason)
            for delta in choice.delta.tool_calls or []:
                assert delta.index == 0
                ids += [delta.id] if delta.id else []
                names += [delta.function.name] if delta.function and delta.function.name else []
                arguments += (delta.function.arguments or "") if delta.function else ""
    assert names == ["get_weather"] and len(ids) == 1, (names, ids)
    assert isinstance(json.loads(arguments).get("city"), str), arguments
    assert reasons[-1] in ("tool_calls", "stop"), reasons


def test_up_recaps_and_records_the_decision(vllm_server: Server) -> None:
    assert "tool calls" in vllm_server.up_output and "hermes" in vllm_server.up_output, vllm_server.up_output
    record = run_record.live(vllm_server.port)
    assert record is not None and record.plan is not None
    assert (record.plan.tool_call_parser, record.plan.kit_tool_template) == (HERMES, True)
    assert str(BUNDLED_TOOLS_TEMPLATE) in record.argv and "--enable-auto-tool-choice" in record.argv


def test_arguments_are_pinned_to_the_schema_where_vllm_has_the_flag() -> None:
    """vLLM 0.32 constrains a call's arguments only for `strict` tools unless --tool-strict-level parameter;
    0.9.1 has no such flag (and the CPU image gets no tool flags for the bundled model anyway)."""
    settings = Settings.from_env({"MODEL_NAME": "Qwen/Qwen2.5-0.5B-Instruct"})
    for track, version in ((GPU, KIT_VERSION), (CPU, IMAGE_VERSION)):
        argv = container_command(settings, plan_for_container(settings, detect(), track), track)
        assert argv[argv.index("--tool-call-parser") + 1] == HERMES
        assert ("--tool-strict-level" in argv) is (version >= TOOL_STRICT_LEVEL_ADDED_IN), argv
    assert "--tool-strict-level" not in container_command(
        Settings.from_env({"TOOL_CALL_PARSER": "none"}),
        plan_for_container(Settings.from_env({"TOOL_CALL_PARSER": "none"}), detect(), GPU),
        GPU,
    )
