"""Facts about this machine that `auto` settings resolve against (read once, through psutil and, on Linux, /proc)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil

BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@dataclass(frozen=True, slots=True)
class Machine:
    usable_cores: int
    cpu_flags: frozenset[str]
    memory_available_bytes: int
    physical_cores: int | None = None  # distinct cores under usable_cores (SMT siblings share one)

    @property
    def cores(self) -> int:
        """Physical cores this process may use (the usable logical CPUs where the topology is unknown)."""
        return self.physical_cores or self.usable_cores

    @property
    def bf16_flag(self) -> str | None:
        """The CPU flag that gives BF16 a fast kernel here, if any."""
        return next((flag for flag in BF16_FLAGS if flag in self.cpu_flags), None)


CPUINFO = Path("/proc/cpuinfo")  # Linux only: elsewhere (a Docker Desktop host) the flags are unknown
SYSFS_CPU = Path("/sys/devices/system/cpu")


def _cpu_flags(cpuinfo: Path | None = None) -> frozenset[str]:
    try:
        for line in (cpuinfo or CPUINFO).read_text().splitlines():
            if line.startswith(("flags", "Features")):  # x86 / arm64
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _usable_cpus() -> set[int]:
    """The logical CPUs this process may run on (its affinity where the OS has one, as on Linux)."""
    try:
        return set(psutil.Process().cpu_affinity())
    except (AttributeError, psutil.Error, OSError):  # macOS has no affinity: every CPU
        return set(range(psutil.cpu_count() or 1))


def _physical_cores(cpus: set[int], sysfs: Path | None = None) -> int | None:
    """Distinct (package, core) pairs among `cpus`, as vLLM's auto binding counts them; None if unreadable."""
    sysfs = sysfs or SYSFS_CPU
    try:
        return len({(int((sysfs / f"cpu{cpu}/topology/physical_package_id").read_text()),
                     int((sysfs / f"cpu{cpu}/topology/core_id").read_text())) for cpu in cpus})
    except (OSError, ValueError):
        return None


def detect() -> Machine:
    """This machine through psutil (Linux, macOS, Windows alike), plus Linux's CPU flags and topology."""
    cpus = _usable_cpus()
    return Machine(
        usable_cores=len(cpus),
        cpu_flags=_cpu_flags(),
        memory_available_bytes=psutil.virtual_memory().available,
        physical_cores=_physical_cores(cpus),
    )
