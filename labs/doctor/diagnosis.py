"""Which lever to pull, from a few /metrics snapshots: the course's rules, stated with the .env variable.

Policy, first match wins:
1. KV pressure: preemptions rose, or requests wait while KV usage is at or above HIGH_KV_USAGE
   -> raise VLLM_CPU_KVCACHE_SPACE (or lower MAX_MODEL_LEN). SWAP_SPACE adds no blocks on CPU.
2. Waiting only for transient reasons ("deferred": LoRA budget, KV transfer) -> no sizing lever.
3. Prefill bound: requests wait while KV usage is low and batch slots are free (running < MAX_NUM_SEQS):
   long prompts are prefilled in chunks within the step's token budget -> not MAX_NUM_SEQS.
4. Slot bound: requests wait while KV usage is low and the batch is full -> raise MAX_NUM_SEQS.
5. Busy: requests run, none wait -> no lever needed.
6. Idle: nothing runs or waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from labs.served import Served
from serve.processes.metrics import MetricsSnapshot

HIGH_KV_USAGE = 0.90  # at or above this fraction the pool, not the batch size, is what makes requests wait
DEFERRED = "deferred"
SWAP_NOTE = (
    "SWAP_SPACE adds no blocks on CPU (preempted requests are recomputed; vLLM >= 0.18 removed "
    "--swap-space): do not raise it to get more KV room"
)


@dataclass(frozen=True, slots=True)
class Limits:
    """The values the engine runs with that the advice names (the engine does not export them all: they come from
    the record `up` wrote when it started it, labs/served.py), and where they came from."""

    max_num_seqs: int | None = None
    max_model_len: int | None = None
    kv_cache_space_gib: float | None = None
    source: str = ""

    @classmethod
    def of(cls, engine: Served) -> Limits:
        """The engine's limits. Behind the kit's router, the replicas as one engine: their batch slots added up (the
        sum's running requests are judged against them); the KV budget stays one replica's, as each was given."""
        plans = [record.plan for record in engine.replicas() if record.plan is not None]
        if plans:
            return cls(
                sum(plan.max_num_seqs or 0 for plan in plans) or None,
                engine.max_model_len,
                plans[0].kv_cache_space_gib,
                f"the records up wrote for the router and its {len(plans)} replicas",
            )
        return cls(engine.max_num_seqs, engine.max_model_len, engine.kv_cache_space_gib, engine.source)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    state: str  # idle | busy | slots | prefill | kv | deferred
    lever: str | None  # the .env variable to change, if any
    advice: str
    notes: tuple[str, ...] = ()


def trend(values: Sequence[float]) -> str:
    if len(values) < 2 or values[-1] == values[0]:
        return "steady"
    return "rising" if values[-1] > values[0] else "falling"


def _kv_space_gib(last: MetricsSnapshot, limits: Limits) -> float | None:
    labelled = last.cache_config.get("kv_cache_memory_bytes", "")
    if labelled.isdigit():
        return int(labelled) / (1 << 30)
    return limits.kv_cache_space_gib


def _kv_advice(last: MetricsSnapshot, limits: Limits, why: str) -> str:
    space = _kv_space_gib(last, limits)
    raise_kv = (
        f"raise VLLM_CPU_KVCACHE_SPACE from {space:g} to {2 * space:g}" if space else "raise VLLM_CPU_KVCACHE_SPACE"
    )
    lower_len = (
        f"lower MAX_MODEL_LEN from {limits.max_model_len} to {limits.max_model_len // 2}"
        if limits.max_model_len
        else "lower MAX_MODEL_LEN"
    )
    return f"KV-bound: {why}; {raise_kv} (or {lower_len})"


def _notes(history: Sequence[MetricsSnapshot]) -> tuple[str, ...]:
    last = history[-1]
    notes = []
    if last.prefix_queries_total:
        hits = (last.prefix_hits_total or 0.0) / last.prefix_queries_total
        notes.append(f"prefix cache: {hits:.0%} of queried tokens hit")
    swap = last.cache_config.get("swap_space")
    if swap not in (None, "", "None", "0"):
        notes.append(f"cache_config swap_space={swap} GiB: that reserves swap, not KV blocks")
    return tuple(notes)


def diagnose(history: Sequence[MetricsSnapshot], limits: Limits = Limits()) -> Diagnosis:
    """Diagnose the latest snapshot; earlier ones (oldest first) give the trends."""
    if not history:
        raise ValueError("diagnose() needs at least one snapshot; scrape /metrics first")
    last = history[-1]
    notes = _notes(history)
    kv = last.kv_usage or 0.0
    waiting_trend = trend([snap.waiting for snap in history])
    new_preemptions = last.preemptions_total - history[0].preemptions_total
    if new_preemptions > 0 or (last.waiting > 0 and kv >= HIGH_KV_USAGE):
        why = (
            f"{new_preemptions:g} preemption(s) while sampling"
            if new_preemptions > 0
            else f"{last.waiting:g} waiting ({waiting_trend}) with KV usage {kv:.0%}"
        )
        return Diagnosis("kv", "VLLM_CPU_KVCACHE_SPACE", _kv_advice(last, limits, why), (SWAP_NOTE, *notes))
    deferred = last.waiting_by_reason.get(DEFERRED, 0.0)
    if last.waiting > 0 and deferred >= last.waiting:
        return Diagnosis(
            "deferred",
            None,
            f"{last.waiting:g} waiting, all deferred by transient constraints "
            "(LoRA budget, KV transfer): no sizing lever",
            notes,
        )
    seqs = limits.max_num_seqs
    if last.waiting > 0 and seqs is not None and last.running < seqs:
        return Diagnosis(
            "prefill",
            None,
            f"prefill-bound: {last.waiting:g} waiting ({waiting_trend}) with {last.running:g} of "
            f"MAX_NUM_SEQS={seqs} slots in use and KV usage {kv:.0%}: long prompts are being "
            "prefilled in chunks within each step's token budget; neither MAX_NUM_SEQS nor the KV "
            "budget is the limit (VLLM_EXTRA_ARGS=--max-num-batched-tokens N admits more per step)",
            notes,
        )
    if last.waiting > 0:
        target = int(last.running + last.waiting)
        change = f"raise MAX_NUM_SEQS from {seqs} to {max(target, seqs + 1)}" if seqs else "raise MAX_NUM_SEQS"
        return Diagnosis(
            "slots",
            "MAX_NUM_SEQS",
            f"slot-bound: {last.waiting:g} waiting ({waiting_trend}) while KV usage is only "
            f"{kv:.0%} and {last.running:g} run; {change}",
            notes,
        )
    if last.running > 0:
        return Diagnosis(
            "busy", None, f"busy: {last.running:g} running, none waiting, KV usage {kv:.0%}: no lever needed", notes
        )
    return Diagnosis("idle", None, "idle: nothing running or waiting (the gauges move only under load)", notes)
