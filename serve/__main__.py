"""`python -m serve up|down|status|install`: what up.sh and down.sh hand over to."""

from __future__ import annotations

import argparse
import stat
import sys
from pathlib import Path

from rich.table import Table

from serve import preflight, process, runtimes, system
from serve.cli import KitArgumentParser
from serve.health import kv_cache_report
from serve.local_server import RUN_DIR
from serve.llamacpp import MODEL_ALIAS, LlamaCppRuntime
from serve.llamacpp import install as install_llamacpp
from serve.llamacpp import will_build as llamacpp_will_build
from serve.native import MODEL_DIR, NativeRuntime, Started, install, prepare_model
from serve.progress import StepFailed, console, fail, warn
from serve.settings import Settings, SettingsError, env_file


def recap(settings: Settings, runtime: runtimes.Runtime, started: Started | None) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    listening = f" (listening on {settings.host}, port {settings.port})" if settings.exposed else ""
    table.add_row("API", f"{runtime.base_url}/v1{listening}")
    table.add_row("model", settings.model_name)
    table.add_row("runtime", runtime.name)
    table.add_row("settings", str(env_file()))
    for label, value in runtime.recap_rows():
        table.add_row(label, value)
    if started is not None:
        table.add_row("pid", str(started.pid))
        table.add_row("healthy after", f"{started.seconds_to_healthy:.0f} s")
        resolved = started.resolved
        table.add_row("dtype", f"{resolved.dtype} ({resolved.dtype_reason})")
        threads = f"{resolved.omp_threads} ({resolved.omp_threads_reason})"
        if resolved.omp_threads_bind != "auto":  # else the reason above is the binding's
            threads += f", binding {resolved.omp_threads_bind} ({resolved.omp_threads_bind_reason})"
        table.add_row("threads", threads)
        if resolved.max_num_seqs is not None:
            table.add_row("max num seqs", f"{resolved.max_num_seqs} ({resolved.max_num_seqs_reason})")
        if resolved.block_size is not None:
            table.add_row("block size", f"{resolved.block_size} tokens ({resolved.block_size_reason})")
        if resolved.kv_cache_space_gib is not None:
            table.add_row("KV budget", f"{resolved.kv_cache_space_gib} GiB ({resolved.kv_cache_space_reason})")
    report = kv_cache_report(runtime.log_path.read_text(errors="replace")) if runtime.log_path.exists() else None
    if report is not None:
        table.add_row("KV cache", f"{report.tokens:,} tokens; max concurrency {report.max_concurrency:g}x "
                                  f"at {report.max_model_len:,} tokens per request")
    table.add_row("log", str(runtime.log_path))
    table.add_row("auth", "API key required (VLLM_API_KEY)" if settings.api_key else "no API key")
    console.print(table)
    if settings.exposed and not settings.api_key:
        warn(f"vLLM listens on {settings.host} (VLLM_HOST), beyond this machine, with no API key: anyone who "
             f"reaches this machine on port {settings.port} can use it. Set VLLM_API_KEY, or VLLM_HOST=127.0.0.1")


def check_system(settings: Settings, native_vllm: bool) -> None:
    """Refuse, before anything long starts, a path this machine cannot take: the platform, missing programs."""
    needs: list[system.Tool] = []
    if native_vllm:
        problem = system.native_platform_problem()
        if problem is not None:
            raise system.MissingTools(problem)
        needs += system.native_needs(settings.enforce_eager)
    if "llamacpp" in settings.engines and llamacpp_will_build():
        needs += [tool for tool in system.llamacpp_build_needs() if tool not in needs]
    system.check(needs)


def warn_if_key_file_readable(path: Path) -> None:
    """A key in a settings file every local user can read is a key every local user has."""
    try:
        readable_by_all = path.stat().st_mode & stat.S_IROTH
        holds_key = readable_by_all and any(line.strip().startswith("VLLM_API_KEY=") and line.split("=", 1)[1].strip()
                                            for line in path.read_text().splitlines())
    except OSError:
        return
    if holds_key:
        warn(f"{path} holds VLLM_API_KEY and every local user can read it: chmod 600 {path}")


def up(settings: Settings) -> int:
    """Start every engine in ENGINES (vllm, llamacpp)."""
    warn_if_key_file_readable(env_file())
    runtime = runtimes.select(settings) if "vllm" in settings.engines else None
    check_system(settings, isinstance(runtime, NativeRuntime))
    if runtime is not None:
        up_vllm(settings, runtime)
    if "llamacpp" in settings.engines:
        up_llamacpp(settings)
    return 0


def up_llamacpp(settings: Settings) -> None:
    runtime = LlamaCppRuntime(settings)
    console.print(f"Bringing up [bold]{MODEL_ALIAS}[/bold] (llama.cpp, the Ollama-class engine) on "
                  f"{runtime.base_url}/v1")
    if runtime.running_pid() is not None and runtime.healthy():
        console.print(f"[green]✓[/green] llama.cpp already up (pid {runtime.running_pid()}); nothing to do")
        return
    if runtime.running_pid() is not None:
        runtime.stop(quiet=True)
    seconds = runtime.start()
    console.print(f"[green]✓[/green] llama.cpp is up in {seconds:.0f} s (pid {runtime.running_pid()}, "
                  f"interrupt_requests {settings.llamacpp_interrupt_requests}, log {runtime.log_path}). Try: "
                  f"[bold]OPENAI_BASE_URL={runtime.base_url}/v1 MODEL={MODEL_ALIAS} python -m client \"Say OK.\"[/bold]")


def up_vllm(settings: Settings, runtime: runtimes.Runtime) -> int:
    console.print(f"Bringing up [bold]{settings.model_name}[/bold] on {runtime.base_url}/v1 "
                  f"(runtime {runtime.name})")
    if runtime.running_pid() is not None and runtime.healthy():
        console.print(f"[green]✓[/green] already up (pid {runtime.running_pid()}); nothing to do")
        runtimes.record(settings, runtime)
        recap(settings, runtime, None)
        return 0
    if runtime.running_pid() is not None:
        runtime.stop(quiet=True)  # ours but not answering: a half-started server; start afresh
    resolved = runtime.resolve()
    preflight.run(settings, resolved, runtime.name)  # refuses (exit 2) a configuration vLLM could not start with
    started = runtime.start(resolved)
    runtimes.record(settings, runtime)  # down.sh with RUNTIME=auto stops this runtime, whatever answers then
    console.print(f"[green]✓[/green] vLLM is up. Try: [bold]python -m client \"Say OK.\"[/bold] "
                  f"(from .venv) or curl {runtime.base_url}/v1/models")
    recap(settings, runtime, started)
    return 0


def down(settings: Settings, remove_volumes: bool = False) -> int:
    """Stop the engines in ENGINES on the configured ports; name any other one of ours still running."""
    vllm, llamacpp = runtimes.select(settings), LlamaCppRuntime(settings)
    engines = (("vllm", "vLLM", vllm, settings.port), ("llamacpp", "llama.cpp", llamacpp, settings.llamacpp_port))
    for engine, label, runtime, port in engines:
        if engine not in settings.engines:
            if runtime.running_pid() is not None:
                console.print(f"{label} still runs on port {port} (not in ENGINES={','.join(settings.engines)}); "
                              f"stop it with ENGINES={engine} bash down.sh")
            continue
        stopped = runtimes.stop(runtime, remove_volumes) if engine == "vllm" else runtime.stop()
        if engine == "vllm":
            runtimes.forget(settings, vllm)  # nothing of it runs now
        if not stopped:
            console.print(f"Nothing to stop: no {label} started by this kit on port {port}")
    return 0


def status(settings: Settings) -> int:
    """0 when every engine in ENGINES is healthy; else the worst code (1 unhealthy, 3 down)."""
    codes = []
    if "vllm" in settings.engines:
        codes.append(status_vllm(settings))
    if "llamacpp" in settings.engines:
        runtime = LlamaCppRuntime(settings)
        pid = runtime.running_pid()
        if pid is None:
            console.print(f"llama.cpp down: none started by this kit on port {settings.llamacpp_port}")
            codes.append(3)
        else:
            healthy = runtime.healthy()
            console.print(f"llama.cpp up: pid {pid}, {'healthy' if healthy else 'starting or unhealthy'}, "
                          f"{runtime.base_url}/v1")
            codes.append(0 if healthy else 1)
    return max(codes)


def status_vllm(settings: Settings) -> int:
    runtime = runtimes.select(settings)
    pid = runtime.running_pid()
    if pid is None:
        console.print(f"down: no vLLM started by this kit on port {settings.port}")
        return 3
    state = "healthy" if runtime.healthy() else "starting or unhealthy"
    console.print(f"up: pid {pid}, {state}, {runtime.base_url}/v1")
    return 0 if state == "healthy" else 1


def prepare(settings: Settings) -> int:
    """Install every engine in ENGINES (tests/run.sh asks for both)."""
    check_system(settings, native_vllm="vllm" in settings.engines)
    if "vllm" in settings.engines:
        install(settings.torch_index_url)
        prepare_model()
        console.print(f"[green]✓[/green] vLLM venv and model ready ({MODEL_DIR})")
    if "llamacpp" in settings.engines:
        install_llamacpp()
        console.print("[green]✓[/green] llama.cpp venv and GGUF ready (.kit/llamacpp)")
    return 0


COMMANDS = {"up": up, "down": down, "status": status, "install": prepare}


def main(argv: list[str] | None = None) -> int:
    parser = KitArgumentParser(prog="python -m serve", description=__doc__)
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("--volumes", action="store_true", help="down: also remove the Docker model cache")
    args = parser.parse_args(argv)
    if args.volumes and args.command != "down":
        parser.error("--volumes goes with down only (bash down.sh --volumes)")
    try:
        settings = Settings.load()
        if args.command not in ("up", "down"):
            return COMMANDS[args.command](settings)
        ports = [settings.port] if "vllm" in settings.engines else []
        ports += [settings.llamacpp_port] if "llamacpp" in settings.engines else []
        with process.port_lock(RUN_DIR, ports, console.print):
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
