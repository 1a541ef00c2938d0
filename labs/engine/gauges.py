"""The engine's load on `GET /metrics` under vLLM's metric names, so the kit reads it as it reads vLLM.

Updated once per engine step by the engine thread; read by Prometheus' exposition on the HTTP side.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from labs.engine.llm_engine import LLMEngine


class EngineGauges:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.running = Gauge("vllm:num_requests_running", "requests in the batch", registry=self.registry)
        self.waiting = Gauge("vllm:num_requests_waiting", "requests queued", registry=self.registry)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "fraction of KV blocks in use", registry=self.registry)
        self.preemptions = Counter("vllm:num_preemptions", "sequences preempted", registry=self.registry)

    def observe(self, engine: LLMEngine, new_preemptions: int) -> None:
        scheduler, pool = engine.scheduler, engine.block_pool
        self.running.set(len(scheduler.running))
        self.waiting.set(len(scheduler.waiting))
        self.kv_usage.set(pool.num_used_blocks / pool.num_blocks)
        self.preemptions.inc(new_preemptions)

    def exposition(self) -> str:
        return generate_latest(self.registry).decode()
