"""A real agent framework, unchanged, on the kit's vLLM: the OpenAI Agents SDK (pyproject's `agents` extra) runs its
tool loop against the session's vLLM with one local Python function as the tool.

What is tested is the contract, not SmolLM2-135M's judgement: the tool is chosen for the model (by name, or
`required`), and the framework must parse the call vLLM returns, run the function with its arguments, send the
result back (`role: tool`, `tool_call_id`) and get a final answer. How often the model picks the tool by itself
(`auto`) is its own skill, measured apart (benchmarks/tool_choice_skill.py)."""

from __future__ import annotations

import pytest
from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from agents.items import MessageOutputItem, ToolCallItem, ToolCallOutputItem
from openai import AsyncOpenAI

from tests.conftest import MODEL, Server

QUESTION = "What is the weather in Paris?"
MAX_TURNS = 3  # the call, then the answer: a third would be a loop
ANSWER_TOKENS = 64


@pytest.fixture(autouse=True)
def no_tracing() -> None:
    set_tracing_disabled(True)  # the SDK would send its traces to OpenAI's servers, out of reach (and not wanted)


@pytest.mark.parametrize("tool_choice", ["get_weather", "required"], ids=["named", "required"])
def test_the_agents_tool_loop_calls_the_function_sends_its_result_and_gets_an_answer(
    vllm_server: Server, tool_choice: str
) -> None:
    cities: list[str] = []

    def get_weather(city: str) -> str:
        """The weather in a city now."""
        cities.append(city)
        return f"Sunny, 21 degrees Celsius in {city}."

    # offered once: the turn after its result is the model's answer, not a second call of a forced tool
    tool = function_tool(get_weather, is_enabled=lambda context, agent: not cities)
    client = AsyncOpenAI(base_url=vllm_server.api_url, api_key="none", max_retries=0, timeout=120)
    agent = Agent(
        name="weather",
        instructions="Answer questions about the weather with the get_weather tool.",
        tools=[tool],
        model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
        model_settings=ModelSettings(tool_choice=tool_choice, temperature=0, max_tokens=ANSWER_TOKENS),
    )
    result = Runner.run_sync(agent, QUESTION, max_turns=MAX_TURNS)

    assert len(cities) == 1 and cities[0].strip(), cities  # the framework parsed the call and ran the function once
    kinds = [type(item) for item in result.new_items]
    assert kinds[:2] == [ToolCallItem, ToolCallOutputItem] and kinds[-1] is MessageOutputItem, kinds
    (output,) = [item for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    assert output.output == f"Sunny, 21 degrees Celsius in {cities[0]}."  # what it sent back to vLLM
    assert isinstance(result.final_output, str) and result.final_output.strip(), result.final_output
