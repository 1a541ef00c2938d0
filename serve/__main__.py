"""`python -m serve up|down|status|install`: what up.sh and down.sh hand over to."""

from __future__ import annotations

import argparse
import sys

from rich.table import Table

from serve import runtimes
from serve.health import kv_cache_report
from serve.native import MODEL_DIR, NativeRuntime, Started, install, prepare_model
from serve.progress import StepFailed, console, fail
from serve.settings import Settings, SettingsError, env_file


def recap(settings: Settings, runtime: NativeRuntime, started: Started | None) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("API", f"{settings.base_url}/v1")
    table.add_row("model", settings.model_name)
    table.add_row("runtime", runtime.name)
    table.add_row("settings", str(env_file()))
    if started is not None:
        table.add_row("pid", str(started.pid))
        table.add_row("healthy after", f"{started.seconds_to_healthy:.0f} s")
        table.add_row("dtype", f"{started.resolved.dtype} ({started.resolved.dtype_reason})")
        table.add_row("threads", f"{started.resolved.omp_threads} ({started.resolved.omp_threads_reason}), "
                                 f"binding {settings.omp_threads_bind}")
    report = kv_cache_report(runtime.log_path.read_text(errors="replace")) if runtime.log_path.exists() else None
    if report is not None:
        table.add_row("KV cache", f"{report.tokens:,} tokens; max concurrency {report.max_concurrency:g}x "
                                  f"at {report.max_model_len:,} tokens per request")
    table.add_row("log", str(runtime.log_path))
    table.add_row("auth", "API key required (VLLM_API_KEY)" if settings.api_key else "no API key")
    console.print(table)


def up(settings: Settings) -> int:
    runtime = runtimes.select(settings)
    console.print(f"Bringing up [bold]{settings.model_name}[/bold] on {settings.base_url}/v1 "
                  f"(runtime {runtime.name})")
    if runtime.running_pid() is not None and runtime.healthy():
        console.print(f"[green]✓[/green] already up (pid {runtime.running_pid()}); nothing to do")
        recap(settings, runtime, None)
        return 0
    if runtime.running_pid() is not None:
        runtime.stop(quiet=True)  # ours but not answering: a half-started server; start afresh
    started = runtime.start()
    console.print(f"[green]✓[/green] vLLM is up. Try: [bold]python -m client \"Say OK.\"[/bold] "
                  f"(from .venv) or curl {settings.base_url}/v1/models")
    recap(settings, runtime, started)
    return 0


def down(settings: Settings) -> int:
    runtime = runtimes.select(settings)
    if not runtime.stop():
        console.print(f"Nothing to stop: no vLLM started by this kit on port {settings.port}")
    return 0


def status(settings: Settings) -> int:
    runtime = runtimes.select(settings)
    pid = runtime.running_pid()
    if pid is None:
        console.print(f"down: no vLLM started by this kit on port {settings.port}")
        return 3
    state = "healthy" if runtime.healthy() else "starting or unhealthy"
    console.print(f"up: pid {pid}, {state}, {settings.base_url}/v1")
    return 0 if state == "healthy" else 1


def prepare(_: Settings) -> int:
    install()
    prepare_model()
    console.print(f"[green]✓[/green] vLLM venv and model ready ({MODEL_DIR})")
    return 0


COMMANDS = {"up": up, "down": down, "status": status, "install": prepare}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m serve", description=__doc__)
    parser.add_argument("command", choices=COMMANDS)
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](Settings.load())
    except SettingsError as exc:
        fail(str(exc), code=2)
    except StepFailed as exc:
        fail(str(exc), code=1)
    except KeyboardInterrupt:
        fail("interrupted", code=130)
    return 1


if __name__ == "__main__":
    sys.exit(main())
