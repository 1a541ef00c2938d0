"""The kit's own Prometheus, natively: Debian's `prometheus` package, started by up.sh when PROMETHEUS=true.

The kit installs nothing on the system: a machine without the `prometheus` program is told the one command that
installs it, before any engine starts. It scrapes what `.kit/observe/prometheus.yml` names (serve/observe/scrape.py),
listens on 127.0.0.1:PROMETHEUS_PORT only, keeps its data in `.kit/observe/data`, and runs under the kit's
supervisor like the engines:
    .kit/run/prometheus-PORT.pid, .kit/logs/prometheus-PORT.log
down.sh stops it whatever PROMETHEUS says then: it has nothing to watch once the engines are gone.
"""

from __future__ import annotations

import os
import shutil

from serve.config.paths import ROOT
from serve.config.settings import Settings
from serve.install import system
from serve.observe import scrape
from serve.processes.local_server import LocalRuntime, LocalServer
from ui.progress import console

PROGRAM = system.Tool(
    ("prometheus",), "PROMETHEUS=true starts the kit's Prometheus with it", "prometheus", "golang-github-prometheus"
)
LOOPBACK = "127.0.0.1"  # its web UI and API have no authentication: never beyond this machine
READY_PATH = "/-/ready"  # 200 once it serves queries
START_TIMEOUT_S = 60  # it starts in a second or two; a slow disk replaying its write-ahead log takes longer
RETENTION = "7d"  # a lab's history, not a production one's: the data folder stays small


class PrometheusRuntime(LocalRuntime):
    """Prometheus on 127.0.0.1:PROMETHEUS_PORT with the kit's scrape configuration."""

    label = "Prometheus"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.port = settings.prometheus_port
        self.server = LocalServer(
            self.label,
            "prometheus",
            "prometheus",
            LOOPBACK,
            self.port,
            "PROMETHEUS_PORT",
            f"http://{LOOPBACK}:{self.port}",
            health_path=READY_PATH,
            restart=settings.restart,
            restart_attempts=settings.restart_attempts,
        )

    def system_needs(self) -> list[system.Tool]:
        return [PROGRAM]

    def command(self) -> list[str]:
        program = shutil.which(PROGRAM.commands[0]) or PROGRAM.commands[0]
        return [
            program,
            f"--config.file={scrape.CONFIG_PATH}",
            f"--storage.tsdb.path={scrape.DATA_DIR}",
            f"--storage.tsdb.retention.time={RETENTION}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
        ]

    def preflight(self) -> None:
        """Its program and its port, checked before any engine starts (MissingTools, SettingsError)."""
        system.check(self.system_needs())
        if self.running_pid() is None:
            self.server.ensure_port_free(hint=" (a Prometheus of the system's?)")

    def start(self) -> None:
        """(Re)start it on a configuration written now; left as it is when it already runs on the same one."""
        before = scrape.CONFIG_PATH.read_text() if scrape.CONFIG_PATH.exists() else None
        if self.running_pid() is not None and self.healthy() and before == scrape.config_text(self.settings):
            console.print(f"[green]✓[/green] Prometheus already up (pid {self.running_pid()}); nothing to do")
        else:
            if self.running_pid() is not None:
                console.print("Prometheus runs on another scrape configuration: restarting it on this one")
                self.stop(quiet=True)
            self.server.ensure_port_free()
            scrape.write(self.settings)
            pid, waited = self.server.launch(self.command(), dict(os.environ), START_TIMEOUT_S, "it starts in seconds")
            console.print(f"[green]✓[/green] Prometheus is up in {waited:.0f} s (pid {pid})")
        for line in self.recap_lines():
            console.print(line, soft_wrap=True, highlight=False)

    def recap_lines(self) -> list[str]:
        targets = ", ".join(f"{job.name} {' '.join(job.targets)}" for job in scrape.jobs(self.settings))
        return [
            f"  Prometheus  {self.base_url} (config {scrape.CONFIG_PATH.relative_to(ROOT)}, "
            f"log {self.log_path.relative_to(ROOT)})",
            f"  scraping    {targets} every {scrape.SCRAPE_INTERVAL_S} s",
            f"  try         curl -s '{self.base_url}/api/v1/query?query=vllm:num_requests_running'",
        ]


def wanted(settings: Settings) -> PrometheusRuntime | None:
    """The kit's Prometheus when PROMETHEUS=true, its program and port checked (before any engine starts)."""
    if not settings.prometheus:
        return None
    runtime = PrometheusRuntime(settings)
    runtime.preflight()
    return runtime


def stop(settings: Settings) -> None:
    """Stop the kit's Prometheus on PROMETHEUS_PORT if one runs (down.sh, whatever PROMETHEUS says now)."""
    PrometheusRuntime(settings).stop()
