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
from pathlib import Path

from serve.config.machine import Machine, detect, usable_cpus
from serve.config.settings import Settings
from serve.config.sizing import VLLM_CPU_OVERHEAD_BYTES, GiB
from serve.config.vllm_command import AUTO_KV_MEMORY_SHARE, Resolved
from serve.processes.local_server import RUN_DIR
from ui.values import SettingsError

PREFIX_CACHING_FLAG = "--enable-prefix-caching"


def replica_ports(settings: Settings) -> list[int]:
    return [settings.port + index for index in range(1, settings.replicas + 1)]


def metrics_port(settings: Settings) -> int:
    """Where the router's Prometheus endpoint listens (it always opens one; its default 29000 is no one's)."""
    return settings.port + settings.replicas + 1


def cpu_list(cpus: tuple[int, ...]) -> str:
    """(0, 1, 2, 5) -> '0-2,5': the form VLLM_CPU_OMP_THREADS_BIND takes."""
    parts: list[str] = []
    start = previous = cpus[0]
    for cpu in (*cpus[1:], None):
        if cpu is not None and cpu == previous + 1:
            previous = cpu
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if cpu is not None:
            start = previous = cpu
    return ",".join(parts)


@dataclass(frozen=True, slots=True)
class Share:
    """Replica `index` of `count`: the CPUs it binds to; memory is 1/count of the machine's."""

    index: int  # 1..count
    count: int
    cpus: tuple[int, ...]

    @property
    def bind(self) -> str:
        return cpu_list(self.cpus)

    def machine(self, whole: Machine) -> Machine:
        """The machine as this replica sees it: its cores, its part of the memory available."""
        return dataclasses.replace(
            whole,
            usable_cores=len(self.cpus),
            physical_cores=len(self.cpus),
            memory_available_bytes=whole.memory_available_bytes // self.count,
        )

    def memory_cap_bytes(self, whole: Machine) -> int:
        return int(whole.memory_available_bytes * AUTO_KV_MEMORY_SHARE) // self.count

    def apply(self, settings: Settings, resolved: Resolved) -> Resolved:
        """Bind to this share's CPUs, one OpenMP thread each, unless VLLM_CPU_OMP_THREADS_BIND is set."""
        if settings.omp_threads_bind != "auto":
            return resolved
        return dataclasses.replace(
            resolved,
            omp_threads_bind=self.bind,
            omp_threads=len(self.cpus),
            omp_threads_bind_reason=f"replica {self.index} of {self.count}: its own CPUs",
            omp_threads_reason=f"replica {self.index} of {self.count}: one per CPU it binds",
            multiprocessing=True,  # vLLM binds a worker process only: the uni executor would spread over every CPU
            multiprocessing_reason=f"replica {self.index} of {self.count}: a worker process, for vLLM's binding",
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


def record_path(settings: Settings) -> Path:
    return RUN_DIR / f"replicas-{settings.port}"


def record(settings: Settings) -> None:
    """Remember how many replicas `up` started behind VLLM_PORT, so that `down` stops them all whatever
    REPLICAS says then."""
    if settings.replicas > 1:
        record_path(settings).parent.mkdir(parents=True, exist_ok=True)
        record_path(settings).write_text(f"{settings.replicas}\n")


def as_started(settings: Settings) -> Settings:
    """The settings with REPLICAS as the last `up` on VLLM_PORT started them (for `down`)."""
    try:
        count = int(record_path(settings).read_text())
    except (OSError, ValueError):
        return settings
    return dataclasses.replace(settings, replicas=max(count, settings.replicas))


def forget(settings: Settings) -> None:
    record_path(settings).unlink(missing_ok=True)
