"""AMD's zentorch against vLLM's own CPU linears, on one decode step's shapes, side by side in one run.

    .kit/vllm/bin/python -m pip install --target /tmp/zentorch --no-deps zentorch==2.13.0.2 deprecated wrapt
    PYTHONPATH=/tmp/zentorch .kit/vllm/bin/python -m benchmarks.zentorch_linears

A decode step of the bundled model runs every layer's four projections (q/k/v, o, gate/up, down) and the head
once, for as many rows as sequences in the step. vLLM 0.32 runs them through oneDNN with prepacked weights
(`create_onednn_mm`/`onednn_mm`, vllm/model_executor/layers/utils.py); on its ZenCpuPlatform through zentorch with
prepacked weights (`zentorch_linear_unary`). Both are timed here on the same random float32 weights, alternating
call by call (each arm first in every other repeat), and the median ms per step is kept. It needs zentorch
importable (PYTHONPATH), runs in the vLLM venv, and writes results.json.

This is the GEMM part of the step only; a served engine adds attention, norms and the scheduler to both arms.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from labs.results import Envelope, command_line, write
from serve.config.model import BUNDLED_MODEL_CONFIG
from serve.config.paths import ROOT
from ui.cli import KitArgumentParser, positive_int, positive_ints

DEFAULT_OUT = ROOT / "results" / "zentorch_linears"


def step_shapes(config: dict[str, int]) -> tuple[list[tuple[int, int]], tuple[int, int], int]:
    """(out, in) of one layer's projections, the head's, and the number of layers."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    head_dim = hidden // config["num_attention_heads"]
    qkv = (config["num_attention_heads"] + 2 * config["num_key_value_heads"]) * head_dim
    layer = [(qkv, hidden), (hidden, hidden), (2 * inter, hidden), (hidden, inter)]
    return layer, (config["vocab_size"], hidden), config["num_hidden_layers"]


def timed_ms(step: Callable[[], None]) -> float:
    started = time.perf_counter()
    step()
    return (time.perf_counter() - started) * 1000


def compare(rows: int, repeats: int) -> dict[str, float]:
    from vllm import _custom_ops as ops

    zen = torch.ops.zentorch
    layer, head, num_layers = step_shapes(json.loads(BUNDLED_MODEL_CONFIG.read_text()))
    weights = [torch.randn(out, inp) for out, inp in [*layer, head]]
    inputs = [torch.randn(rows, weight.shape[1]) for weight in weights]
    handlers = [ops.create_onednn_mm(weight.t(), 32) for weight in weights]
    packed = [zen.zentorch_weight_prepack_for_linear(weight) for weight in weights]
    calls = range(len(layer))

    def onednn() -> None:
        for _ in range(num_layers):
            for i in calls:
                ops.onednn_mm(handlers[i], inputs[i], None)
        ops.onednn_mm(handlers[-1], inputs[-1], None)

    def zentorch() -> None:
        for _ in range(num_layers):
            for i in calls:
                zen.zentorch_linear_unary(inputs[i], packed[i], None, is_weight_prepacked=True)
        zen.zentorch_linear_unary(inputs[-1], packed[-1], None, is_weight_prepacked=True)

    difference = (
        (
            ops.onednn_mm(handlers[-1], inputs[-1], None)
            - zen.zentorch_linear_unary(inputs[-1], packed[-1], None, is_weight_prepacked=True)
        )
        .abs()
        .max()
        .item()
    )
    arms = {"onednn": onednn, "zentorch": zentorch}
    for arm in arms.values():
        arm()
    times: dict[str, list[float]] = {name: [] for name in arms}
    for repeat in range(repeats):
        for name in list(arms) if repeat % 2 == 0 else list(arms)[::-1]:
            times[name].append(timed_ms(arms[name]))
    onednn_ms, zentorch_ms = statistics.median(times["onednn"]), statistics.median(times["zentorch"])
    return {
        "rows": rows,
        "onednn_ms_per_step": onednn_ms,
        "zentorch_ms_per_step": zentorch_ms,
        "zentorch_speed_x": onednn_ms / zentorch_ms,
        "head_max_abs_difference": difference,
    }


def main(argv: list[str] | None = None) -> int:
    parser = KitArgumentParser(prog="python -m benchmarks.zentorch_linears", description=__doc__)
    parser.add_argument("--rows", type=positive_ints, default=positive_ints("1,4,16"), help="sequences per step")
    parser.add_argument("--repeats", type=positive_int, default=16, help="timed steps per arm and row count")
    parser.add_argument("--threads", type=positive_int, default=torch.get_num_threads())
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    try:
        import zentorch
    except ImportError as exc:
        parser.error(f"zentorch does not import ({exc}): install it as the first line of this module's help says")
    torch.set_num_threads(args.threads)
    points = []
    for rows in args.rows:
        point = compare(rows, args.repeats)
        points.append(point)
        print(
            f"{rows:>3} rows: oneDNN {point['onednn_ms_per_step']:.1f} ms/step, zentorch "
            f"{point['zentorch_ms_per_step']:.1f} ms/step: zentorch {point['zentorch_speed_x']:.2f}x"
        )
    payload = {
        "zentorch_version": zentorch.__version__,
        "torch_version": torch.__version__,
        "threads": args.threads,
        "dtype": "float32",
        "points": points,
    }
    command = command_line("python -m benchmarks.zentorch_linears", sys.argv[1:] if argv is None else argv)
    write(args.out / "results.json", Envelope.now(command), payload)
    print(f"Wrote {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
