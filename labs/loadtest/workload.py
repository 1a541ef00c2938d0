"""WHAT to send and WHEN: arrivals (open or closed loop), output lengths and prompts, reproducible by seed.

Open loop: requests arrive on their own clock, whether or not the engine keeps up. The gaps between
arrivals are gamma-distributed with mean 1/rate: burstiness 1 is a Poisson process, below 1 burstier,
above 1 more regular ("regular" is the limit: equal gaps). Closed loop: `concurrency` users, each sends
its next request the moment its previous answer ends.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

ARRIVALS = ("poisson", "bursty", "regular")
BURSTY_BURSTINESS = 0.25  # gamma shape for "bursty": coefficient of variation of the gaps = 1/sqrt(0.25) = 2
NO_LOAD = "no load given: set --rate (open loop) or --concurrency (closed loop)"
DEFAULT_NUM_REQUESTS = 48
DEFAULT_RATE_RPS = 25.0
# The seed engine study's heavy tail: 80% of requests want ~24 tokens, 20% want ~150.
DEFAULT_LENGTHS = "mix:24@0.8,150@0.2"

# The lab's prompt set: short questions a user of a small instruct model would ask.
DEFAULT_PROMPTS = (
    "Explain what a KV cache is in two sentences.",
    "Write a haiku about a busy GPU.",
    "List three uses of a hash map.",
    "What does continuous batching change for latency?",
    "Summarize the plot of Hamlet in one paragraph.",
    "Give me a short recipe for pancakes.",
    "Why is the sky blue? Answer briefly.",
    "Translate 'good morning, how are you?' into French and Spanish.",
    "Describe a cat to someone who has never seen one.",
    "What is the difference between a process and a thread?",
    "Name five planets and one fact about each.",
    "Write a limerick about a slow web server.",
)


@dataclass(frozen=True, slots=True)
class LengthBand:
    """Output lengths drawn uniformly from [min_tokens, max_tokens], chosen with this weight."""

    min_tokens: int
    max_tokens: int
    weight: float


def parse_lengths(spec: str) -> tuple[LengthBand, ...]:
    """`fixed:64`, `uniform:16-128`, or `mix:24@0.8,150@0.2` (each part `N` or `A-B`, then `@weight`)."""
    kind, _, body = spec.partition(":")
    try:
        if kind == "fixed":
            return (LengthBand(int(body), int(body), 1.0),)
        if kind == "uniform":
            low, high = (int(part) for part in body.split("-"))
            return (LengthBand(low, high, 1.0),)
        if kind == "mix":
            bands = []
            for part in body.split(","):
                tokens, weight = part.split("@")
                shortest, _, longest = tokens.partition("-")
                bands.append(LengthBand(int(shortest), int(longest or shortest), float(weight)))
            return tuple(bands)
    except ValueError:
        pass
    raise ValueError(f"--lengths {spec!r} is invalid: use fixed:64, uniform:16-128 or mix:24@0.8,150@0.2")


def read_prompts(path: Path) -> tuple[str, ...]:
    """One prompt per non-empty line."""
    try:
        prompts = tuple(line.strip() for line in path.read_text().splitlines() if line.strip())
    except OSError as exc:
        raise ValueError(
            f"--prompts {path} cannot be read ({exc.strerror}): give a text file, one prompt a line"
        ) from exc
    if not prompts:
        raise ValueError(f"--prompts {path} holds no prompt: write one prompt per line")
    return prompts


@dataclass(slots=True)
class WorkloadSpec:
    """One load point. `rate_rps=None` with `concurrency` is a closed loop; both set caps an open loop."""

    num_requests: int = DEFAULT_NUM_REQUESTS
    rate_rps: float | None = DEFAULT_RATE_RPS
    arrival: str = "poisson"
    burstiness: float | None = None  # None: 1 for poisson, BURSTY_BURSTINESS for bursty
    concurrency: int | None = None
    lengths: tuple[LengthBand, ...] = field(default_factory=lambda: parse_lengths(DEFAULT_LENGTHS))
    prompts: tuple[str, ...] = DEFAULT_PROMPTS
    seed: int = 0
    ignore_eos: bool = True
    temperature: float = 0.0

    def __post_init__(self) -> None:
        if self.num_requests <= 0:
            raise ValueError(f"--requests {self.num_requests} is invalid: send at least 1 request")
        if self.arrival not in ARRIVALS:
            raise ValueError(f"--arrival {self.arrival!r} is invalid: choose one of {', '.join(ARRIVALS)}")
        if self.rate_rps is not None and self.rate_rps <= 0:
            raise ValueError(f"--rate {self.rate_rps} is invalid: give requests per second > 0")
        if self.concurrency is not None and self.concurrency <= 0:
            raise ValueError(f"--concurrency {self.concurrency} is invalid: give at least 1 user")
        if self.rate_rps is None and self.concurrency is None:
            raise ValueError(NO_LOAD)
        self.burstiness = self.gamma_shape
        if self.burstiness <= 0:
            raise ValueError(f"--burstiness {self.burstiness} is invalid: give a gamma shape > 0 (1 = Poisson)")
        if self.arrival == "poisson" and self.burstiness != 1.0:
            raise ValueError("--arrival poisson means burstiness 1: use --arrival bursty for another shape")
        for band in self.lengths:
            if not 0 < band.min_tokens <= band.max_tokens or band.weight <= 0:
                raise ValueError(f"output length band {band} is invalid: need 0 < min <= max and weight > 0")
        if not self.prompts:
            raise ValueError("no prompts: give --prompts a file with one prompt per line")

    @property
    def closed_loop(self) -> bool:
        return self.rate_rps is None

    @property
    def label(self) -> str:
        """How this load point is named in tables and plots."""
        if self.closed_loop:
            return f"{self.concurrency} user{'' if self.concurrency == 1 else 's'}"
        cap = f", max {self.concurrency} in flight" if self.concurrency else ""
        return f"{self.rate_rps:g} req/s {self.arrival}{cap}"

    @property
    def gamma_shape(self) -> float:
        """The arrivals' gamma shape: --burstiness, else 1 for poisson and BURSTY_BURSTINESS for bursty."""
        if self.burstiness is not None:
            return self.burstiness
        return BURSTY_BURSTINESS if self.arrival == "bursty" else 1.0

    @property
    def load_value(self) -> float:
        """The x of a sweep plot: the rate (open loop) or the number of users (closed loop)."""
        if self.rate_rps is not None:
            return float(self.rate_rps)
        if self.concurrency is None:  # only when changed after __post_init__, which refuses it
            raise ValueError(NO_LOAD)
        return float(self.concurrency)


@dataclass(frozen=True, slots=True)
class ScheduledRequest:
    request_id: int
    offset_s: float  # arrival time after the run starts; 0 for every request of a closed loop
    prompt: str
    max_tokens: int


def arrival_gap_s(rng: random.Random, rate_per_s: float, burstiness: float = 1.0) -> float:
    """The seeded gap before the next open-loop arrival: gamma-distributed with mean 1/rate and shape
    `burstiness` (scale = mean / shape). Burstiness 1 is a Poisson process, whose gaps are exponential and
    drawn as such. The kit's one arrival generator: this load tester and the teaching engine's seed study
    (labs/engine/workload.py) both draw from it."""
    if burstiness == 1.0:
        return rng.expovariate(rate_per_s)
    mean_gap_s = 1.0 / rate_per_s
    return rng.gammavariate(burstiness, mean_gap_s / burstiness)


def arrival_offsets_s(spec: WorkloadSpec, rng: random.Random) -> list[float]:
    if spec.rate_rps is None:  # a closed loop
        return [0.0] * spec.num_requests
    mean_gap_s = 1.0 / spec.rate_rps
    offsets, now_s = [], 0.0
    for _ in range(spec.num_requests):
        offsets.append(now_s)
        if spec.arrival == "regular":
            now_s += mean_gap_s
        else:
            now_s += arrival_gap_s(rng, spec.rate_rps, spec.gamma_shape)
    return offsets


def schedule(spec: WorkloadSpec) -> list[ScheduledRequest]:
    """The whole run, decided up front from the seed: the same spec always gives the same schedule."""
    rng = random.Random(spec.seed)
    offsets = arrival_offsets_s(spec, rng)
    weights = [band.weight for band in spec.lengths]
    scheduled = []
    for request_id, offset_s in enumerate(offsets):
        band = rng.choices(spec.lengths, weights)[0]
        scheduled.append(
            ScheduledRequest(
                request_id,
                offset_s,
                spec.prompts[request_id % len(spec.prompts)],
                rng.randint(band.min_tokens, band.max_tokens),
            )
        )
    return scheduled
