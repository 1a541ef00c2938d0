"""The Docker runtimes: compose.yaml's CPU service (RUNTIME=docker) and its GPU profile (RUNTIME=docker-gpu).

What compose gets for each track is serve.engines.tracks' (the RESOLVED_* variables). After `compose build` (CPU) or
`compose pull` (GPU) and `compose up -d`, the health wait and the recap are the native runtime's own
(serve.processes.health), reading the container's log that `compose logs --follow` writes. Compose is v2's plugin or
v1's docker-compose (serve.engines.compose), always with this clone's project name.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import time

from serve.config.machine import detect
from serve.config.paths import ROOT
from serve.config.plan import Plan
from serve.config.settings import Settings
from serve.engines.compose import Compose, project_name
from serve.engines.runtime import Started, VllmRuntime
from serve.engines.tracks import (
    CONTAINER_HOST,
    CONTAINER_PORT,
    CPU,
    GPU,
    TRACKS,
    Track,
    compose_env,
    container_command,
    container_env,
    plan_for_container,
)
from serve.install import system
from serve.processes import process, run_record
from serve.processes.health import is_healthy, wait_for_kv_line, wait_healthy
from serve.processes.local_server import LOG_DIR, ensure_port_free
from ui.environment import env_file
from ui.progress import StepFailed, console, run_logged
from ui.values import SettingsError

__all__ = [
    "COMPOSE_FILE",
    "CONTAINER_HOST",
    "CONTAINER_PORT",
    "CPU",
    "GPU",
    "TRACKS",
    "DockerRuntime",
    "Track",
    "compose_env",
    "container_command",
    "plan_for_container",
]  # the tracks' names stay importable from here

COMPOSE_FILE = ROOT / "compose.yaml"
QUERY_TIMEOUT_S = 60
# What Docker and Compose say when an image cannot be fetched (unknown to the registry, none reachable); read
# only once the engine is known not to hold the image, so a later failing build step is never taken for one.
PULL_FAILURES = (
    "pull access denied",
    "repository does not exist",
    "manifest unknown",
    "manifest for",
    "not found",
    "no such host",
    "failed to resolve",
    "error pulling image",
    "i/o timeout",
    "connection refused",
    "tls handshake timeout",
    "network is unreachable",
)
LOG_CATCH_UP_S = 5.0  # how long the recap waits for `compose logs` to deliver the KV-cache line


class DockerRuntime(VllmRuntime):
    """One compose service of compose.yaml; its containers belong to this clone's compose project."""

    def __init__(self, settings: Settings, track: Track, compose: Compose, docker: str = "docker") -> None:
        self.requested = settings
        self.track = track
        self.compose_cli = compose
        self.docker = docker
        self.project = project_name()
        self.name = track.runtime
        self.port = settings.port_of(track.port_setting)
        self.base_url = settings.url_for(self.port)
        self.log_path = LOG_DIR / f"docker-{track.service}-{self.port}.log"
        self.compose_log = LOG_DIR / "docker-compose.log"
        self._engine_cpus: int | None = None

    @property
    def engine_cpus(self) -> int:
        """The CPUs the Docker engine has: compose's `cpus` cannot exceed them (the engine refuses the container)."""
        if self._engine_cpus is None:
            answer = self._query([self.docker, "info", "--format", "{{.NCPU}}"], with_env=False)
            if not answer.isdigit() or int(answer) < 1:
                raise StepFailed(f"`docker info` reported {answer!r} CPUs; is the Docker engine healthy?")
            self._engine_cpus = int(answer)
        return self._engine_cpus

    @property
    def settings(self) -> Settings:
        """The settings the container gets: CPU_LIMIT capped at the engine's CPUs (the recap says so)."""
        if self.track is not CPU or self.requested.cpu_limit <= self.engine_cpus:
            return self.requested
        return dataclasses.replace(self.requested, cpu_limit=float(self.engine_cpus))

    def image(self) -> str:
        return (
            f"{self.requested.cpu_base_image}:{self.requested.cpu_image_tag}"
            if self.track is CPU
            else self.requested.gpu_image
        )

    def system_needs(self) -> list[system.Tool]:
        return []  # the image brings everything; find_docker already checked the engine and Compose

    def install(self) -> None:
        """Nothing ahead of time: `start` builds or pulls the image (its cache makes later starts quick)."""

    def where_rows(self) -> list[tuple[str, str]]:
        """What the recap adds for a container: its caps (and why CPU_LIMIT was capped), image and project."""
        if self.track is CPU:
            cpus = f"{self.settings.cpu_limit:g} CPUs"
            if self.settings.cpu_limit < self.requested.cpu_limit:
                cpus += (
                    f" (CPU_LIMIT={self.requested.cpu_limit:g} capped at the Docker engine's {self.engine_cpus} CPUs)"
                )
            limits = f"{cpus}, memory {self.requested.memory_limit} (MEMORY_LIMIT), built on {self.image()}"
        else:
            limits = f"every GPU, image {self.image()}"
        return [
            ("container", limits),
            ("compose", f"{self.compose_cli.label}, project {self.project} (bash down.sh stops it)"),
        ]

    def compose(self, *args: str) -> list[str]:
        profiles = [flag for profile in self.track.profiles for flag in ("--profile", profile)]
        return [
            *self.compose_cli.argv,
            "-p",
            self.project,
            "--env-file",
            str(env_file()),
            "-f",
            str(COMPOSE_FILE),
            *profiles,
            *args,
        ]

    def _query(self, argv: list[str], with_env: bool = True) -> str:
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=QUERY_TIMEOUT_S,
            cwd=ROOT,
            env=self._env(None) if with_env else None,
        )
        if result.returncode != 0:
            raise StepFailed(
                f"`{shlex.join(argv[1:])}` failed (exit {result.returncode}): "
                f"{(result.stderr or result.stdout).strip()}"
            )
        return result.stdout.strip()

    def _env(self, resolved: Plan | None) -> dict[str, str]:
        resolved = resolved or self.resolve()
        return {**os.environ, **compose_env(self.settings, resolved, self.track)}

    def container_id(self) -> str | None:
        lines = self._query(self.compose("ps", "-q", self.track.service)).splitlines()
        return lines[0] if lines else None

    def project_services(self) -> set[str]:
        """The services of this clone's project that have a container (running or not), any profile."""
        names = self._query(
            [
                self.docker,
                "ps",
                "-a",
                "--filter",
                f"label=com.docker.compose.project={self.project}",
                "--format",
                '{{.Label "com.docker.compose.service"}}',
            ],
            with_env=False,
        )
        return set(names.split())

    def _running(self) -> tuple[int, int] | None:
        """(host pid, restarts) of the service's container while it runs, else None."""
        container = self.container_id()
        if container is None:
            return None
        status, pid, restarts = self._query(
            [self.docker, "inspect", "--format", "{{.State.Status}} {{.State.Pid}} {{.RestartCount}}", container]
        ).split()
        return (int(pid), int(restarts)) if status == "running" and int(pid) > 0 else None

    def running_pid(self) -> int | None:
        """The host pid of the service's container while it runs, else None (also while a crash loop
        has it "restarting")."""
        running = self._running()
        return running[0] if running else None

    def alive_since_start(self) -> bool:
        """Running, and never restarted: a restart during the health wait is a crash (restart: unless-stopped
        would otherwise hide it for minutes), so the wait reports it at once."""
        running = self._running()
        return running is not None and running[1] == 0

    def healthy(self) -> bool:
        return is_healthy(self.base_url)

    def check(self) -> None:
        ensure_port_free(self.settings.host, self.port, self.track.port_setting)

    def resolve(self) -> Plan:
        return plan_for_container(self.settings, detect(), self.track)

    def start(self, plan: Plan | None = None, *, serve_early: bool = False) -> Started:
        """Build or pull, `compose up -d`, then wait for /health; on failure the service is taken down."""
        self.check()
        plan = plan or self.resolve()
        env = self._env(plan)
        service = self.track.service
        logged_before = self.compose_log.stat().st_size if self.compose_log.exists() else 0
        try:
            if self.track.builds_image:
                run_logged(
                    f"Building the patched CPU image (Dockerfile.cpu on {self.image()}; the first build "
                    "downloads several GB: slow, not hung)",
                    self.compose("build", *self.compose_cli.build_flags, service),
                    self.compose_log,
                    env=env,
                )
            else:
                run_logged(
                    f"Pulling {self.image()} (the first pull downloads several GB: slow, not hung)",
                    self.compose("pull", service),
                    self.compose_log,
                    env=env,
                )
        except StepFailed as exc:
            way_out = self.unreachable_image_way_out(logged_before)
            raise StepFailed(f"{exc}\n{way_out}" if way_out else str(exc)) from None
        run_logged(
            f"Starting the {service} container",
            self.compose("up", "-d", "--no-build", service),
            self.compose_log,
            env=env,
        )
        self.log_path.unlink(missing_ok=True)
        follower = process.spawn(
            self.compose("logs", "--follow", "--no-color", "--no-log-prefix", service), self.log_path, env, cwd=ROOT
        )
        try:
            waited = wait_healthy(
                self.base_url,
                self.alive_since_start,
                self.log_path,
                self.settings.start_timeout_s,
                f"Starting vLLM in {service} (log {self.log_path.relative_to(ROOT)}; "
                "the first start also downloads the model)",
            )
            wait_for_kv_line(self.log_path, LOG_CATCH_UP_S)  # vLLM logged it before /health; `logs` may lag
        except (StepFailed, KeyboardInterrupt):
            time.sleep(1)  # let `compose logs` flush the container's last words into the log
            self.stop(quiet=True)
            raise
        finally:
            process.stop_group(follower)
        self.engine_version = f"image {self.image()}"
        argv = container_command(self.settings, plan, self.track)
        inside = container_env(self.settings, plan, self.track)  # what vLLM runs with in the container
        return Started.recorded(
            self.record(self.running_pid() or 0, plan, argv, inside, self.settings.model_name), waited
        )

    def unreachable_image_way_out(self, log_offset: int) -> str | None:
        """After a failed build or pull: when the engine does not hold the image and compose's output since
        `log_offset` says it could not be fetched, the one line naming both ways out; else None (another failure)."""
        if (
            subprocess.run(
                [self.docker, "image", "inspect", self.image()], capture_output=True, timeout=QUERY_TIMEOUT_S
            ).returncode
            == 0
        ):
            return None
        with self.compose_log.open("rb") as log:
            log.seek(log_offset)
            output = log.read().decode(errors="replace").lower()
        if not any(words in output for words in PULL_FAILURES):
            return None
        setting = "CPU_BASE_IMAGE" if self.track is CPU else "GPU_IMAGE"
        return (
            f"{self.image()} could not be fetched (no registry this Docker engine reaches has it, nor the engine "
            f"itself): `RUNTIME=native bash up.sh` serves without Docker, or set {setting} to an image a "
            "reachable registry or this Docker engine has"
        )

    def stop(self, quiet: bool = False, remove_volumes: bool = False) -> bool:
        """Remove this track's container; False if it had none (and no volume was asked to go).

        `compose down` only when no other service of the project has a container: down takes every service of
        the active profiles with it (the GPU profile's down would remove the CPU container too)."""
        services = self.project_services()
        others = sorted(services - {self.track.service})
        if self.track.service not in services and not remove_volumes:
            return False
        if others and remove_volumes:
            raise SettingsError(
                f"--volumes would remove the model cache that {', '.join(others)} (project "
                f"{self.project}) still uses; stop it first, then run bash down.sh --volumes again"
            )
        started = time.monotonic()
        if others:
            remove, what = self.compose("rm", "--stop", "--force", self.track.service), "compose rm --stop"
        else:
            remove = self.compose("down", "--volumes") if remove_volumes else self.compose("down")
            what = "compose down" + (" --volumes" if remove_volumes else "")
        run_logged(
            f"Removing the {self.track.service} container ({what})", remove, self.compose_log, env=self._env(None)
        )
        run_record.remove(self.port)  # what it ran with runs no more
        if not process.wait_port_free(self.settings.host, self.port):
            raise StepFailed(f"{what} finished, but port {self.port} is still in use by another process")
        if not quiet:
            kept = (
                "the model cache volume is removed"
                if remove_volumes
                else "the model cache volume is kept (bash down.sh --volumes removes it)"
            )
            console.print(
                f"[green]✓[/green] {self.track.service} stopped in {time.monotonic() - started:.1f} s; "
                f"port {self.port} is free; {kept}"
            )
        return True
