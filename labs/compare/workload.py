"""What the comparison sends, and to whom: the prompts, the three phases, the engines from the settings."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import cycle, islice

from client.endpoint import Endpoint
from serve.config.settings import Settings
from serve.engines.runtimes import ENGINES
from ui.environment import load_env

MAX_TOKENS = 48
DEFAULT_N = 3
MODEL_SOURCE = "MODEL_NAME (vLLM)"  # the setting named when an engine serves another model
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
    return (
        Phase("seed sequential", SEED_PROMPTS, concurrent=False),
        Phase("matched sequential", matched, concurrent=False),
        Phase("matched concurrent", matched, concurrent=True),
    )


def targets(settings: Settings, engines: tuple[str, ...] | None = None) -> tuple[Endpoint, ...]:
    """The configured engines (ENGINES), each at its configured port, with the key the kit sends there."""
    env = load_env()
    endpoints = []
    for name in engines or settings.engines:
        engine = ENGINES[name]
        endpoints.append(
            Endpoint.at(
                name,
                f"{engine.base_url(settings)}/v1",
                engine.served_model(settings),
                env,
                kind=name,
                url_source=engine.port_setting(settings),
                model_source=MODEL_SOURCE,
            )
        )
    return tuple(endpoints)
