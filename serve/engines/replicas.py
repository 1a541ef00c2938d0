"""REPLICAS=N natively: N vLLM engines, each on its own port and its own share of the cores and memory,
behind vllm-router on VLLM_PORT (serve/engines/router.py).

Ports, a rule a user can predict: replica i (1..N) listens on VLLM_PORT+i, the router's Prometheus metrics
on VLLM_PORT+N+1, all on VLLM_HOST. The router takes VLLM_PORT itself, so clients change nothing.

Shares: the usable CPUs, in order, are cut into N contiguous groups (2 cores, 2 replicas: core 0 and core 1),
and each replica binds its OpenMP threads to its group (VLLM_CPU_OMP_THREADS_BIND): two engines that each
bound "auto" would both compute on the same cores. Each replica sizes its KV budget from 1/N of the memory
the auto budget may take. Prefix caching is on in every replica: the router's cache-aware policy only pays
when the replica it picks still holds the prefix.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from serve.config.machine import Machine, detect, usable_cpus
from serve.config.plan import RuntimeLimits, cpu_list, native_limits
from serve.config.settings import Settings
from serve.config.sizing import VLLM_CPU_OVERHEAD_BYTES, GiB
from serve.processes import run_record
from ui.values import SettingsError

REPLICA_LABEL = "vLLM replica"  # "vLLM replica 1/2": how users, the recap and the records name one


def replica_ports(settings: Settings) -> list[int]:
    return [settings.port + index for index in range(1, settings.replicas + 1)]


def metrics_port(settings: Settings) -> int:
    """Where the router's Prometheus endpoint listens (it always opens one; its default 29000 is no one's)."""
    return settings.port + settings.replicas + 1


@dataclass(frozen=True, slots=True)
class Share:
    """Replica `index` of `count`: the CPUs it binds to; memory is 1/count of what the auto budget may take."""

    index: int  # 1..count
    count: int
    cpus: tuple[int, ...]

    @property
    def bind(self) -> str:
        return cpu_list(self.cpus)

    def limits(self, whole: Machine) -> RuntimeLimits:
        """What this replica may use, for the one resolver: its CPUs (bound unless VLLM_CPU_OMP_THREADS_BIND is set),
        its part of the memory a native engine's auto budget may take."""
        native = native_limits(whole)
        return dataclasses.replace(
            native,
            cores=len(self.cpus),
            cpus=self.cpus,
            memory_bytes=(native.memory_bytes or 0) // self.count,
            where=f"replica {self.index} of {self.count}",
        )


def shares(settings: Settings, cpus: list[int] | None = None) -> list[Share]:
    """The N shares of the usable CPUs; SettingsError when there are fewer CPUs than replicas."""
    cpus = sorted(cpus if cpus is not None else usable_cpus())
    count = settings.replicas
    if count > len(cpus):
        raise SettingsError(
            f"REPLICAS={count} is too many for this machine: it has {len(cpus)} usable CPUs and "
            f"each replica needs at least one of its own; set REPLICAS={len(cpus)} or less"
        )
    size, extra = divmod(len(cpus), count)
    result, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        result.append(Share(index + 1, count, tuple(cpus[start:end])))
        start = end
    return result


def check_memory(settings: Settings, needed_bytes_each: int, whole: Machine | None = None) -> None:
    """Refuse N replicas whose weights + KV + runtime do not fit the memory available, with the numbers."""
    whole = whole or detect()
    total = needed_bytes_each * settings.replicas
    if total <= whole.memory_available_bytes:
        return
    fits = max(1, whole.memory_available_bytes // needed_bytes_each)
    raise SettingsError(
        f"REPLICAS={settings.replicas} is too many for this machine's memory: each replica needs "
        f"{needed_bytes_each / GiB:.2f} GiB (weights + KV budget + runtime ~{VLLM_CPU_OVERHEAD_BYTES / GiB:.1f} "
        f"GiB), {total / GiB:.2f} GiB in all, and {whole.memory_available_bytes / GiB:.2f} GiB is available; "
        f"set REPLICAS={fits} or a smaller VLLM_CPU_KVCACHE_SPACE"
    )


def as_started(settings: Settings) -> Settings:
    """The settings with REPLICAS as the last `up` on VLLM_PORT started them, for `down`: the router's record lists
    its replicas, and replicas recorded on VLLM_PORT+1, +2 ... count too (an `up` that failed before the router)."""
    router = run_record.read_quietly(settings.port)
    listed = len(router.replica_ports) if router is not None and router.runtime == "router" else 0
    found = 0
    while (replica := run_record.read_quietly(settings.port + found + 1)) and replica.label.startswith(REPLICA_LABEL):
        found += 1
    return dataclasses.replace(settings, replicas=max(listed, found, settings.replicas))
