"""The engine the tour sets beside vLLM: the learner's own Ollama where one answers holding a model, else the kit's
llama.cpp server, or whatever --endpoint names; and what the report then says of the comparison.

No registry here ships Ollama: theirs is tests/support/ollama_standin.py, a stand-in named as one, answering
/api/version and /api/tags over real HTTP. The seed and contract sections hand the choice to labs.compare and
labs.contract as --endpoint, whose run against the stand-in is tests/labs/compare/test_compare.py's.
"""

from __future__ import annotations

import pytest

from labs.tour import engines
from labs.tour.engines import ollama_class
from labs.tour.readings.course import read_seed
from serve.config.settings import Settings
from tests.conftest import free_port, kit_env
from tests.support.ollama_standin import VERSION, ollama_standin


@pytest.fixture(autouse=True)
def no_ollama_on_its_own_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever runs on this machine's 11434 stays out of it: the stand-in is found on LLAMACPP_PORT."""
    monkeypatch.setattr(engines, "OLLAMA_URL", f"http://127.0.0.1:{free_port()}")


def settings_with_llamacpp_port(port: int) -> Settings:
    return Settings.from_env(kit_env(LLAMACPP_PORT=str(port)))


def test_their_ollama_with_another_model_is_used_and_the_report_says_what_that_does() -> None:
    port = free_port()
    with ollama_standin(port, models=("qwen2.5:1.5b",)) as ollama:
        beside = ollama_class(settings_with_llamacpp_port(port), None)
    assert beside.name == "ollama" and beside.kit_engines == ["vllm"]
    assert beside.lab_args == ["--engines", "vllm", "--endpoint", f"ollama={ollama}/v1@qwen2.5:1.5b"]
    assert beside.described == (
        f"your Ollama {VERSION} at {ollama}, model qwen2.5:1.5b: not the model vLLM serves (1.5B parameters: 11x the "
        "135M vLLM serves): the comparison measures the model as much as the engine; `ollama pull smollm2:135m` "
        "makes it the same model"
    )


def test_their_ollama_holding_the_kits_model_is_asked_for_that_one() -> None:
    port = free_port()
    with ollama_standin(port, models=("qwen2.5:1.5b", "smollm2:135m")):
        beside = ollama_class(settings_with_llamacpp_port(port), None)
    assert beside.endpoint is not None and beside.endpoint.model == "smollm2:135m"
    assert beside.described.endswith("engine against engine")


def test_an_ollama_holding_no_model_or_none_at_all_leaves_the_kits_llamacpp() -> None:
    port = free_port()
    with ollama_standin(port, models=()):
        empty = ollama_class(settings_with_llamacpp_port(port), None)
    nothing = ollama_class(settings_with_llamacpp_port(free_port()), None)
    for beside in (empty, nothing):
        assert beside.name == "llamacpp" and beside.endpoint is None and beside.kit_engines == ["vllm", "llamacpp"]
        assert beside.lab_args == ["--engines", "vllm,llamacpp"] and "no Ollama of yours answered" in beside.described


def test_endpoint_names_the_engine_and_the_seed_reading_uses_its_name() -> None:
    port = free_port()
    with ollama_standin(port) as ollama:
        beside = ollama_class(settings_with_llamacpp_port(free_port()), f"mine={ollama}/v1@smollm2:135m")
    assert beside.name == "mine" and beside.endpoint is not None and beside.endpoint.model == "smollm2:135m"
    summaries = [
        {
            "engine": engine,
            "mode": mode,
            "wall_s": wall,
            "output_tokens_per_s": rate,
            "num_requests": 4,
            "num_ok": 4,
            "num_truncated": 0,
            "num_empty": 0,
            "num_failed": 0,
        }
        for engine, rates in (("vllm", (8.0, 2.0, 20.0, 80.0)), ("mine", (4.0, 4.0, 40.0, 40.0)))
        for mode, wall, rate in (
            ("matched sequential", rates[0], rates[2]),
            ("matched concurrent", rates[1], rates[3]),
        )
    ]
    data = {
        "n": 4,
        "summaries": summaries,
        "scaling": {"vllm": 4.0, "mine": 1.0},
        "beside": {"name": beside.name, "described": beside.described},
    }
    reading = read_seed(data)
    assert reading.headline == "vLLM 4.00x vs mine 1.00x"
    assert f"Beside vLLM: {beside.described}." in reading.sentences
    assert any(sentence.startswith("Beside it, mine took 4.00 s") for sentence in reading.sentences), reading.sentences
