"""Facts about this machine that `auto` settings resolve against (read once, through psutil and, on Linux, /proc)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil

BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# The benchmarks' stand-in for a smaller CPU: with KIT_CPU_ISA=avx2 the kit resolves its `auto` settings as on a
# CPU without AVX-512 and AMX, and the native engine runs that CPU's kernels (vLLM's _C_AVX2, torch's and
# oneDNN's AVX2 code: engine_plugins/isa_avx2/). Memory bandwidth and core count stay this machine's.
ISA_ENV = "KIT_CPU_ISA"
ISA_CAPS = {"avx2": ("avx512", "amx")}  # the flags a CPU of that ISA lacks, by prefix


def isa_label(cpu_flags: frozenset[str] | set[str] | tuple[str, ...]) -> str:
    """The vector ISA that decides the engine's kernels, from CPU flags: AVX-512 + AMX, AVX-512 (+ BF16), AVX2."""
    if any(flag.startswith("amx") for flag in cpu_flags):
        return "AVX-512 + AMX"
    if "avx512f" in cpu_flags:
        return "AVX-512 + BF16" if "avx512_bf16" in cpu_flags else "AVX-512"
    if "avx2" in cpu_flags:
        return "AVX2"
    return "other"


@dataclass(frozen=True, slots=True)
class Machine:
    usable_cores: int
    cpu_flags: frozenset[str]
    memory_available_bytes: int
    physical_cores: int | None = None  # distinct cores under usable_cores (SMT siblings share one)
    vendor: str = ""  # /proc/cpuinfo's vendor_id: "AuthenticAMD", "GenuineIntel"; "" where unknown

    @property
    def cores(self) -> int:
        """Physical cores this process may use (the usable logical CPUs where the topology is unknown)."""
        return self.physical_cores or self.usable_cores

    @property
    def isa(self) -> str:
        """The vector ISA that decides the engine's kernels, as figures name it: AMX, AVX-512 (+ BF16), AVX2."""
        return isa_label(self.cpu_flags)

    @property
    def bf16_flag(self) -> str | None:
        """The CPU flag that gives BF16 a fast kernel here, if any."""
        return next((flag for flag in BF16_FLAGS if flag in self.cpu_flags), None)


CPUINFO = Path("/proc/cpuinfo")  # Linux only: elsewhere (a Docker Desktop host) the flags are unknown
SYSFS_CPU = Path("/sys/devices/system/cpu")


def isa_cap() -> str | None:
    """The smaller ISA the benchmarks asked for (KIT_CPU_ISA), or None: this CPU as it is."""
    cap = os.environ.get(ISA_ENV, "").strip().lower() or None
    if cap is not None and cap not in ISA_CAPS:
        raise ValueError(
            f"{ISA_ENV}={cap!r} is not a CPU the kit can stand in for: use {', '.join(ISA_CAPS)} or unset it"
        )
    return cap


def _cpu_flags(cpuinfo: Path | None = None) -> frozenset[str]:
    flags: frozenset[str] = frozenset()
    try:
        for line in (cpuinfo or CPUINFO).read_text().splitlines():
            if line.startswith(("flags", "Features")):  # x86 / arm64
                flags = frozenset(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    cap = isa_cap()
    if cap is None:
        return flags
    return frozenset(flag for flag in flags if not flag.startswith(ISA_CAPS[cap]))


def _cpu_vendor(cpuinfo: Path | None = None) -> str:
    try:
        for line in (cpuinfo or CPUINFO).read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def usable_cpus() -> set[int]:
    """The logical CPUs this process may run on (its affinity where the OS has one, as on Linux)."""
    try:
        return set(psutil.Process().cpu_affinity())
    except (AttributeError, psutil.Error, OSError):  # macOS has no affinity: every CPU
        return set(range(psutil.cpu_count() or 1))


CGROUP = Path("/sys/fs/cgroup")
# (limit, usage, the memory.stat key of reclaimable page cache) for cgroup v2, then v1
CGROUP_MEMORY_FILES = (
    ("memory.max", "memory.current", "inactive_file"),
    ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "total_inactive_file"),
)


def _cgroup_memory_free_bytes(root: Path = CGROUP) -> int | None:
    """What this process's memory cgroup still allows (a container's cap), None when uncapped or unreadable.

    Free = limit - (usage - inactive page cache), as `docker stats` counts it. Inside a container the
    cgroup's files are mounted at /sys/fs/cgroup; /proc/meminfo there still shows the host's memory."""
    for limit_file, usage_file, inactive_key in CGROUP_MEMORY_FILES:
        try:
            limit_text = (root / limit_file).read_text().strip()
            usage = int((root / usage_file).read_text())
        except (OSError, ValueError):
            continue
        if not limit_text.isdigit() or int(limit_text) >= 2**62:  # "max" (v2) or v1's 9223372036854771712
            return None
        inactive = 0
        try:
            for line in ((root / usage_file).parent / "memory.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == inactive_key and value.strip().isdigit():
                    inactive = int(value)
        except OSError:
            pass
        return max(0, int(limit_text) - max(0, usage - inactive))
    return None


def _physical_cores(cpus: set[int], sysfs: Path | None = None) -> int | None:
    """Distinct (package, core) pairs among `cpus`, as vLLM's auto binding counts them; None if unreadable."""
    sysfs = sysfs or SYSFS_CPU
    try:
        return len(
            {
                (
                    int((sysfs / f"cpu{cpu}/topology/physical_package_id").read_text()),
                    int((sysfs / f"cpu{cpu}/topology/core_id").read_text()),
                )
                for cpu in cpus
            }
        )
    except (OSError, ValueError):
        return None


def _memory_available_bytes() -> int:
    """The memory free for a new process: the OS's view, capped by a memory cgroup's (inside a container)."""
    available = psutil.virtual_memory().available
    capped = _cgroup_memory_free_bytes()
    return available if capped is None else min(available, capped)


def detect() -> Machine:
    """This machine through psutil (Linux, macOS, Windows alike), plus Linux's CPU flags and topology."""
    cpus = usable_cpus()
    return Machine(
        usable_cores=len(cpus),
        cpu_flags=_cpu_flags(),
        memory_available_bytes=_memory_available_bytes(),
        physical_cores=_physical_cores(cpus),
        vendor=_cpu_vendor(),
    )
