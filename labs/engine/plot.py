"""Draw the experiment's JSON: TTFT p50, output throughput and KV slots against max batch, static vs continuous.

Runs in the light venv (matplotlib, no torch): `.venv/bin/python -m labs.engine.plot results/engine/study.json`
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from labs.engine.study import BatchingResult, Study, load_study
from labs.results import ResultsError
from ui.cli import KitArgumentParser

POLICY_STYLES = {"static": "o--", "continuous": "s-"}
FIGURE_SIZE_IN = (15, 4.5)


def _series(results: list[BatchingResult], policy: str, key: str) -> tuple[list[int], list[float]]:
    rows = sorted((r for r in results if r.policy == policy), key=lambda r: r.max_batch_size)
    return [r.max_batch_size for r in rows], [getattr(r, key) for r in rows]


def plot(study: Study, out: Path) -> Path:
    results = study.results
    figure, (ttft_ax, throughput_ax, kv_ax) = plt.subplots(1, 3, figsize=FIGURE_SIZE_IN)
    for policy, style in POLICY_STYLES.items():
        batches, ttft_ms = _series(results, policy, "ttft_p50_ms")
        if batches:
            ttft_ax.plot(batches, ttft_ms, style, label=policy)
            throughput_ax.plot(batches, _series(results, policy, "output_tokens_per_s")[1], style, label=policy)
    ttft_ax.set(title="TTFT p50 (ms, log)", xlabel="max batch", yscale="log")
    throughput_ax.set(title="output tokens/s", xlabel="max batch")
    batches = sorted({r.max_batch_size for r in results})
    for axis in (ttft_ax, throughput_ax):
        axis.set_xscale("log", base=2)
        axis.set_xticks(batches, [str(batch) for batch in batches])
    kv_rows = sorted(results, key=lambda r: (r.max_batch_size, r.policy))
    labels = [f"{r.max_batch_size}\n{r.policy[:4]}" for r in kv_rows]
    positions = range(len(kv_rows))
    width = 0.28
    for offset, key, label in (
        (-width, "kv_live_tokens", "live tokens"),
        (0, "kv_paged_slots", "paged slots"),
        (width, "kv_max_len_slots", "max_len reservation"),
    ):
        kv_ax.bar([p + offset for p in positions], [getattr(r, key) for r in kv_rows], width, label=label)
    kv_ax.set_xticks(list(positions), labels, fontsize=7)
    kv_ax.set(title="KV slots at the peak", xlabel="max batch / policy")
    for axis in (ttft_ax, throughput_ax, kv_ax):
        axis.legend(fontsize=8)
        axis.grid(alpha=0.3)
    args = study.args
    figure.suptitle(
        f"{args.get('requests', '?')} requests at {args.get('rate', '?')}/s, lengths "
        f"{args.get('lengths', '?')}, blocks of {args.get('block_size', '?')}"
    )
    figure.tight_layout()
    figure.savefig(out)
    plt.close(figure)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = KitArgumentParser(prog="python -m labs.engine.plot", description=__doc__.split("\n")[0])
    parser.add_argument("study", type=Path, help="the JSON that labs.engine.experiment wrote")
    parser.add_argument("--out", type=Path, default=None, help="PNG path (default: next to the JSON)")
    args = parser.parse_args(argv)
    try:
        study = load_study(args.study)
    except ResultsError as exc:
        print(f"error: {exc} (this plot draws a study: run labs.engine.experiment first)", file=sys.stderr)
        return 2
    if not study.results:
        print(f"error: {args.study} holds no runs: run labs.engine.experiment first", file=sys.stderr)
        return 2
    out = plot(study, args.out or args.study.with_suffix(".png"))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
