"""`python -m labs.doctor [--watch]`: read an engine's /metrics and say which .env lever to pull.

One-shot: a few samples a moment apart (for trends), then running, waiting, KV usage, preemptions, the
cache config and a diagnosis. --watch: a live table refreshed every --interval-s while load runs.
Behind the kit's router (REPLICAS > 1) it reads every replica and the router: each replica, their sum
(diagnosed as one engine), and an imbalance if the router leaves one replica far busier.
Exit codes: 0 diagnosed, 1 engine unreachable, 3 the engine exposes no metrics.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path

import httpx
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from labs.doctor import replicas
from labs.doctor.diagnosis import Diagnosis, Limits, diagnose
from labs.served import served
from serve.config.settings import Settings
from serve.engines.runtimes import VLLM
from serve.processes.metrics import MetricsSnapshot, NoMetrics, combine, scrape
from ui.cli import KitArgumentParser, positive_float, positive_int
from ui.progress import console, fail
from ui.values import SettingsError

NO_METRICS_EXIT = 3
MODELS_TIMEOUT_S = 5.0
TREND_WINDOW = 10  # snapshots kept for trends in watch mode
NO_METRICS = (
    "this engine exposes no metrics: {url}/metrics is not Prometheus text from vLLM "
    "(Ollama and llama.cpp's server have none); measure it from the client side (labs.loadtest)"
)


def cache_line(snapshot: MetricsSnapshot) -> str:
    config = snapshot.cache_config
    if not config:
        return "not exported"
    blocks, size = config.get("num_gpu_blocks", "?"), config.get("block_size", "?")
    line = f"{blocks} blocks of {size}"
    if "kv_cache_size_tokens" in config:
        line += f" = {int(config['kv_cache_size_tokens']):,} tokens"
    if "kv_cache_memory_bytes" in config and config["kv_cache_memory_bytes"].isdigit():
        line += f" ({int(config['kv_cache_memory_bytes']) / (1 << 30):g} GiB)"
    if "kv_cache_max_concurrency" in config:
        line += f"; {float(config['kv_cache_max_concurrency']):g}x max concurrency"
    return line


def gauges(history: list[MetricsSnapshot]) -> Table:
    first, last = history[0], history[-1]
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    reasons = ", ".join(f"{reason} {value:g}" for reason, value in sorted(last.waiting_by_reason.items()))
    table.add_row("running", f"{last.running:g}")
    table.add_row("waiting", f"{last.waiting:g}" + (f" ({reasons})" if reasons else ""))
    table.add_row("KV usage", "not exported" if last.kv_usage is None else f"{last.kv_usage:.1%}")
    table.add_row(
        "preemptions",
        f"{last.preemptions_total:g} total, +{last.preemptions_total - first.preemptions_total:g} while sampling",
    )
    table.add_row("cache", cache_line(last))
    table.add_row("metrics", f"vLLM {last.format.upper()} names")
    return table


def diagnosis_text(diagnosis: Diagnosis) -> Text:
    text = Text()
    text.append("diagnosis: ", style="bold")
    text.append(diagnosis.advice)
    for note in diagnosis.notes:
        text.append(f"\n  note: {note}")
    return text


def sample(urls: list[str], count: int, interval_s: float) -> list[list[MetricsSnapshot]]:
    """`count` rounds, `interval_s` apart, of one snapshot per URL."""
    history = [[scrape(url) for url in urls]]
    for _ in range(count - 1):
        time.sleep(interval_s)
        history.append([scrape(url) for url in urls])
    return history


def one_shot(
    url: str, limits: Limits, samples: int, interval_s: float, settings: Settings, urls: list[str] | None = None
) -> int:
    """`urls`: the replicas behind the kit's router at `url` (their sum is diagnosed as one engine)."""
    rounds = sample(urls or [url], samples, interval_s)
    history = [combine(round_) for round_ in rounds]
    if urls:
        named = list(zip(urls, rounds[-1], strict=True))
        console.print(
            f"[bold]{url}[/bold] is vllm-router over {len(urls)} replicas ({samples} samples, {interval_s:g} s apart)"
        )
        console.print(replicas.table(named, history[-1]))
        console.print(replicas.router_line(settings))
        console.print(
            replicas.imbalance(named, settings.router_policy)
            or "balance: no replica holds or has finished far more requests than another"
        )
        console.print("[bold]the replicas as one engine[/bold] (sum):")
    else:
        console.print(f"[bold]{url}/metrics[/bold] ({samples} samples, {interval_s:g} s apart)")
    console.print(gauges(history))
    console.print(limits_line(limits))
    console.print(diagnosis_text(diagnose(history, limits)))
    return 0


def limits_line(limits: Limits) -> str:
    """The limits the advice is judged against, and where they came from."""
    seqs = "unknown (vLLM does not report it)" if limits.max_num_seqs is None else str(limits.max_num_seqs)
    kv = "unknown" if limits.kv_cache_space_gib is None else f"{limits.kv_cache_space_gib:g} GiB"
    return (
        f"limits: max_num_seqs {seqs}, max_model_len {limits.max_model_len or 'unknown'}, KV budget {kv} "
        f"(from {limits.source})"
    )


def plain_line(snapshot: MetricsSnapshot, diagnosis: Diagnosis) -> str:
    kv = "-" if snapshot.kv_usage is None else f"{snapshot.kv_usage:.1%}"
    return (
        f"running {snapshot.running:g}  waiting {snapshot.waiting:g}  KV {kv}  "
        f"preemptions {snapshot.preemptions_total:g}  -> {diagnosis.state}"
    )


def watch(
    url: str,
    limits: Limits,
    interval_s: float,
    duration_s: float | None,
    plot_path: Path | None = None,
    replica_urls: list[str] | None = None,
) -> int:
    """Refresh until Ctrl-C or duration_s; a live table on a terminal, a line per sample elsewhere. Behind a
    router, each sample is the replicas' sum."""
    history: deque[MetricsSnapshot] = deque(maxlen=TREND_WINDOW)
    timeline: list[MetricsSnapshot] = []
    started = time.monotonic()

    def tick() -> Diagnosis:
        history.append(combine([scrape(each) for each in replica_urls or [url]]))
        timeline.append(history[-1])
        return diagnose(list(history), limits)

    def running() -> bool:
        return duration_s is None or time.monotonic() - started < duration_s

    try:
        if console.is_terminal:
            with Live(console=Console(), auto_refresh=False) as live:  # a wrapping console, unlike serve's
                while running():
                    diagnosis = tick()
                    live.update(
                        Group(
                            Text(f"{url}/metrics, every {interval_s:g} s (Ctrl-C stops)"),
                            gauges(list(history)),
                            diagnosis_text(diagnosis),
                        ),
                        refresh=True,
                    )
                    time.sleep(interval_s)
        else:
            diagnosis = tick()
            console.print(plain_line(history[-1], diagnosis))
            while running():
                time.sleep(interval_s)
                diagnosis = tick()
                console.print(plain_line(history[-1], diagnosis))
            console.print(diagnosis_text(diagnosis))
    except KeyboardInterrupt:
        pass
    if plot_path is not None and timeline:
        from labs.doctor.plot import write_timeline  # matplotlib only when asked: it is half the start-up time

        write_timeline(timeline, plot_path, f"{url}/metrics")
        console.print(f"timeline of {len(timeline)} samples written to {plot_path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = KitArgumentParser(
        prog="python -m labs.doctor", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="the engine without /v1 (default: VLLM_HOST/VLLM_PORT from .env)")
    parser.add_argument("--watch", action="store_true", help="refresh a live table until Ctrl-C")
    parser.add_argument("--interval-s", type=positive_float, default=1.0, help="seconds between samples")
    parser.add_argument("--samples", type=positive_int, default=3, help="one-shot: samples taken for the trends")
    parser.add_argument("--duration-s", type=positive_float, help="watch: stop after this many seconds")
    parser.add_argument("--plot", type=Path, help="watch: write running, waiting and KV usage over time (PNG)")
    args = parser.parse_args(argv)
    try:
        settings = Settings.load()
    except SettingsError as exc:
        fail(str(exc), code=2)
    url = (args.url or VLLM.base_url(settings)).rstrip("/").removesuffix("/v1")  # GPU_PORT for the GPU track
    try:  # what it runs with: the record up wrote, or what it reports
        engine = served(url, require_metrics=False, require_models=False)
    except httpx.HTTPError as exc:
        fail(f"cannot read {url}/metrics ({exc.__class__.__name__}: {exc}); is the engine up and --url right?")
    limits = Limits.of(engine)
    urls = [record.base_url for record in engine.replicas()]
    try:
        if args.watch:
            return watch(url, limits, args.interval_s, args.duration_s, args.plot, urls)
        return one_shot(url, limits, args.samples, args.interval_s, settings, urls)
    except NoMetrics:
        console.print(NO_METRICS.format(url=url))
        return NO_METRICS_EXIT
    except httpx.HTTPError as exc:
        fail(f"cannot read {url}/metrics ({exc.__class__.__name__}: {exc}); is the engine up and --url right?")
    return 1


if __name__ == "__main__":
    sys.exit(main())
