"""What the comparison sends, and to whom: the prompts, the three phases, the engines from the settings."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import cycle, islice

from serve.llamacpp import MODEL_ALIAS
from serve.settings import Settings

MAX_TOKENS = 48
DEFAULT_N = 3
TEMPERATURE = 0.0  # the same answer on every run and both engines, so the work compared is the same

# The seed lab's first step: four different questions, one after another (a feel for single-user speed).
SEED_PROMPTS = (
    "What is the capital of France?",
    "Explain what a large language model is in two sentences.",
    "Write a haiku about a cup of coffee.",
    "List three uses of the Python programming language.",
)
# The matched set: the same three prompts sent first one after another, then all at once.
MATCHED_PROMPTS = (
    "Explain in three sentences why the sky is blue.",
    "Describe how a bicycle works in three sentences.",
    "Summarize the water cycle in three sentences.",
)


@dataclass(frozen=True, slots=True)
class Phase:
    """One timed run against one engine: these prompts, sent one after another or all at once."""

    mode: str
    prompts: tuple[str, ...]
    concurrent: bool

    def __post_init__(self) -> None:
        if not self.prompts:
            raise ValueError(f"phase {self.mode!r} has no prompts; give it at least one")


def matched_prompts(n: int) -> tuple[str, ...]:
    """n requests drawn from the matched set in turn (n=8: the three prompts, repeated)."""
    if n <= 0:
        raise ValueError(f"N must be a whole number greater than 0 (got {n}); try 3, 8 or 16")
    return tuple(islice(cycle(MATCHED_PROMPTS), n))


def phases(n: int) -> tuple[Phase, ...]:
    matched = matched_prompts(n)
    return (Phase("seed sequential", SEED_PROMPTS, concurrent=False),
            Phase("matched sequential", matched, concurrent=False),
            Phase("matched concurrent", matched, concurrent=True))


@dataclass(frozen=True, slots=True)
class Target:
    """An engine as a client sees it: where its /v1 is and which model name it serves."""

    engine: str
    api_url: str
    model: str
    api_key: str
    port_setting: str  # the variable that moves it (VLLM_PORT, LLAMACPP_PORT, LLAMA_SERVER_PORT)


def targets(settings: Settings, engines: tuple[str, ...] | None = None) -> tuple[Target, ...]:
    """The configured engines (ENGINES), each at its configured port."""
    where = {
        "vllm": Target("vllm", f"{settings.base_url}/v1", settings.model_name, settings.api_key, "VLLM_PORT"),
        "llamacpp": Target("llamacpp", f"{settings.url_for(settings.llamacpp_port)}/v1", MODEL_ALIAS,
                           settings.api_key, "LLAMACPP_PORT"),
        "llamaserver": Target("llamaserver", f"{settings.url_for(settings.llama_server_port)}/v1", MODEL_ALIAS,
                              settings.api_key, "LLAMA_SERVER_PORT"),
    }
    return tuple(where[engine] for engine in (engines or settings.engines))
