"""`python -m serve up|down|status|install`: what up.sh and down.sh hand over to."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from rich.table import Table

from serve.config import env_check
from serve.config.plan import Plan
from serve.config.settings import Settings
from serve.engines import replicas, runtimes
from serve.engines import status as engine_status
from serve.engines.runtime import Runtime, Started
from serve.install import open_webui_venv, system
from serve.observe import prometheus
from serve.processes import process, run_record
from serve.processes.local_server import RUN_DIR
from serve.webui import open_webui
from ui.cli import KitArgumentParser
from ui.environment import env_file
from ui.progress import StepFailed, console, fail, warn
from ui.values import SettingsError


def recap(settings: Settings, runtime: Runtime, started: Started | None) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    listening = f" (listening on {settings.host}, port {runtime.port})" if settings.exposed else ""
    table.add_row("API", f"{runtime.base_url}/v1{listening}")
    table.add_row("model", runtime.served_model)
    table.add_row(
        "runtime",
        f"{runtime.name} (RUNTIME=auto: {runtime.picked_because})" if runtime.picked_because else runtime.name,
    )
    table.add_row("settings", str(env_file()))
    if started is not None:
        table.add_row("pid", str(started.pid))
        table.add_row("healthy after", f"{started.seconds_to_healthy:.0f} s")
    for label, value in runtime.recap_rows(started):
        table.add_row(label, value)
    table.add_row("log", str(runtime.log_path))
    table.add_row("auth", "API key required (VLLM_API_KEY)" if settings.api_key else "no API key")
    console.print(table)
    if settings.exposed and not settings.api_key:
        warn(
            f"{runtime.label} listens on {settings.host} (VLLM_HOST), beyond this machine, with no API key: anyone "
            f"who reaches this machine on port {runtime.port} can use it. Set VLLM_API_KEY, or VLLM_HOST=127.0.0.1"
        )


def check_system(engines: list[Runtime]) -> None:
    """Refuse, before anything long starts, a path this machine cannot take: the platform, missing programs."""
    needs: list[system.Tool] = []
    for runtime in engines:
        needs += [tool for tool in runtime.system_needs() if tool not in needs]
    system.check(needs)


def warn_if_key_file_readable(path: Path) -> None:
    """A key in a settings file every local user can read is a key every local user has."""
    try:
        readable_by_all = path.stat().st_mode & stat.S_IROTH
        holds_key = readable_by_all and any(
            line.strip().startswith("VLLM_API_KEY=") and line.split("=", 1)[1].strip()
            for line in path.read_text().splitlines()
        )
    except OSError:
        return
    if holds_key:
        warn(f"{path} holds VLLM_API_KEY and every local user can read it: chmod 600 {path}")


def up(settings: Settings) -> int:
    """Start every engine in ENGINES, in order; one already up and healthy is left as it is. Every preflight
    runs before the first start: a refusal of the last replica must not come minutes after the first started."""
    warn_if_key_file_readable(env_file())
    engines = runtimes.for_engines(settings)
    check_system(engines)
    observer = prometheus.wanted(settings)  # PROMETHEUS=true: its program and port, checked before any engine starts
    chat_ui = open_webui.wanted(settings)  # OPEN_WEBUI=true: its port, checked before any engine starts
    plans = {id(runtime): plan_for(runtime) for runtime in engines}
    for runtime in engines:
        up_one(settings, runtime, plans[id(runtime)])
    if observer is not None:
        observer.start()
    if chat_ui is not None:
        chat_ui.start()
    return 0


def plan_for(runtime: Runtime) -> Plan | None:
    """The preflight's plan for a runtime that is not already up (one that is keeps what it runs with)."""
    if runtime.running_pid() is not None and runtime.healthy():
        return None
    return runtime.preflight()  # refuses (exit 2) a configuration the engine could not start with


def try_it(settings: Settings, runtime: Runtime) -> str:
    """The client command that talks to this engine (the client's own defaults point at VLLM_PORT)."""
    if runtime.base_url == settings.base_url:
        return f'python -m client "Say OK."[/bold] (from .venv) or curl {runtime.base_url}/v1/models'
    return f'OPENAI_BASE_URL={runtime.base_url}/v1 MODEL={runtime.served_model} python -m client "Say OK."[/bold]'


def up_one(settings: Settings, runtime: Runtime, plan: Plan | None) -> None:
    console.print(
        f"Bringing up [bold]{runtime.served_model}[/bold] ({runtime.label}) on {runtime.base_url}/v1 "
        f"(runtime {runtime.name})"
    )
    if runtime.picked_because:
        console.print(f"RUNTIME=auto picked {runtime.name}: {runtime.picked_because}")
    pid = runtime.running_pid()
    if pid is not None and runtime.healthy():
        console.print(f"[green]✓[/green] {runtime.label} already up (pid {pid}); nothing to do")
        recap(settings, runtime, None)  # its record stays the one its own up wrote
        return
    if pid is not None:  # ours but not answering: a half-started server, or what a dead one left; start afresh
        console.print(
            f"{runtime.label} on port {runtime.port} is not answering but its process group {pid} "
            "still runs (a half-started server, or what a crashed one left behind): stopping it first"
        )
        runtime.stop(quiet=True)
    started = runtime.start(
        plan, serve_early=True
    )  # its record written: what it runs with, for status, the labs and down
    console.print(
        f"[green]✓[/green] {runtime.label} is up in {started.seconds_to_healthy:.0f} s. Try: "
        f"[bold]{try_it(settings, runtime)}"
    )
    recap(settings, runtime, started)


def down(settings: Settings, remove_volumes: bool = False) -> int:
    """Stop the engines in ENGINES on the configured ports (the router before its replicas, all the replicas
    the last `up` started); name any other one of ours still running."""
    settings = replicas.as_started(settings)
    open_webui.stop(settings)  # the kit's Open WebUI, if one runs: nothing to talk to once the engines are gone
    prometheus.stop(settings)  # the kit's Prometheus, if one runs: nothing to watch once the engines are gone
    for engine in runtimes.ENGINES.values():
        started = engine.for_job("stops", settings)
        if engine.name not in settings.engines:
            for runtime in started:
                if runtime.running_pid() is not None:
                    console.print(
                        f"{runtime.label} still runs on port {runtime.port} (not in ENGINES="
                        f"{','.join(settings.engines)}); stop it with ENGINES={engine.name} bash down.sh"
                    )
            continue
        stopped = runtimes.stop_each(started, remove_volumes)
        for runtime in started:
            run_record.remove(runtime.port)  # nothing of it runs now
        report_stopped(started, stopped)
    return 0


def report_stopped(started: list[Runtime], stopped: list[Runtime]) -> None:
    """Per port, the last started first: that nothing was stopped there; where more than one runtime was looked
    at on one port (RUNTIME=auto with no record of what `up` started), which were looked at and which stopped."""
    for port in dict.fromkeys(runtime.port for runtime in reversed(started)):
        looked = [runtime for runtime in reversed(started) if runtime.port == port]
        found = " and ".join(runtime.name for runtime in stopped if runtime.port == port)
        where = (
            f"RUNTIME=auto with no record of what up started on port {port}: looked at "
            f"{' and '.join(runtime.name for runtime in looked)}"
        )
        if not found:
            console.print(
                f"Nothing to stop: no {looked[0].label} started by this kit on port {port}"
                + (f" ({where})" if len(looked) > 1 else "")
            )
        elif len(looked) > 1:
            console.print(f"{where}; stopped {found}")


def status(settings: Settings) -> int:
    """One line per engine the kit runs (serve/engines/status.py); 0 when every engine in ENGINES is healthy, else
    the worst code (1 unhealthy, 3 down)."""
    code, lines = engine_status.report(settings)
    for line in lines:
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    return code


def prepare(settings: Settings) -> int:
    """Install every engine in ENGINES (tests/run.sh asks for all), the native vLLM whatever RUNTIME says; Open
    WebUI's venv too with OPEN_WEBUI=true."""
    engines = runtimes.for_engines(settings, "installs")
    check_system(engines)
    for runtime in engines:
        runtime.install()
        console.print(f"[green]✓[/green] {runtime.label} ready to start ({runtime.name})")
    if settings.open_webui:
        open_webui_venv.install(settings.torch_index_url)
        console.print(f"[green]✓[/green] Open WebUI ready to start ({open_webui_venv.VENV.folder.name} venv)")
    return 0


COMMANDS = {"up": up, "down": down, "status": status, "install": prepare}


def main(argv: list[str] | None = None) -> int:
    parser = KitArgumentParser(prog="python -m serve", description=__doc__)
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("--volumes", action="store_true", help="down: also remove the Docker model cache")
    args = parser.parse_args(argv)
    if args.volumes and args.command != "down":
        parser.error("--volumes goes with down only (bash down.sh --volumes)")
    if args.command == "up":
        for line in env_check.check(env_file(), os.environ):  # a misspelt key would be ignored in silence
            warn(line)
    try:
        settings = Settings.load()
        if args.command not in ("up", "down"):
            return COMMANDS[args.command](settings)
        with process.port_lock(RUN_DIR, runtimes.ports(settings), console.print):
            if args.command == "down":
                return down(settings, remove_volumes=args.volumes)
            return up(settings)
    except SettingsError as exc:
        fail(str(exc), code=2)
    except system.MissingTools as exc:
        fail(str(exc), code=2)
    except StepFailed as exc:
        fail(str(exc), code=1)
    except KeyboardInterrupt:
        fail("interrupted", code=130)
    return 1


if __name__ == "__main__":
    sys.exit(main())
