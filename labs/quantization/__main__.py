"""`python -m labs.quantization`: what a quantized checkpoint costs in quality next to the float one.

Give it the engines to compare (--url, the first is the reference): each one's weights (the folder vLLM
lists as its model's root, read here on this machine) and the bytes a decode step reads of them, perplexity on
the lab's fixed text, and how often its greedy answers match the reference's. Speed is the benchmark's job
(labs/quantization.md gives its command).
"""

from __future__ import annotations

import sys
from pathlib import Path

from client.endpoint import Endpoint, EndpointError
from labs import results
from labs.quantization.lab import Quality, score
from serve.config.settings import Settings
from ui.cli import KitArgumentParser, positive_int
from ui.environment import ROOT, load_env
from ui.progress import fail

DEFAULT_OUT = ROOT / "results" / "quantization.json"  # the one results folder, wherever it is run from


def main(argv: list[str] | None = None) -> int:
    parser = KitArgumentParser(prog="python -m labs.quantization", description=__doc__)
    parser.add_argument(
        "--url",
        action="append",
        help="an engine's /v1 URL; repeat it (default: the kit's vLLM); the first is the reference",
    )
    parser.add_argument("--model", help="the model name (default: MODEL_NAME)")
    parser.add_argument("--windows", type=positive_int, help="score only the text's first N windows of 1,000 tokens")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="results file (default: results/quantization.json)"
    )
    args = parser.parse_args(argv)
    try:
        settings = Settings.load()
        env = load_env()
        endpoints = [
            Endpoint.at(
                f"engine {index}",
                url,
                args.model or settings.model_name,
                env,
                url_source="--url",
                model_source="--model",
            )
            for index, url in enumerate(args.url or [f"{settings.base_url}/v1"], 1)
        ]
        command = results.command_line("labs.quantization", sys.argv[1:] if argv is None else argv)
        score(Quality(endpoints, args.out, command, args.windows))
    except (ValueError, EndpointError) as exc:  # bad input (SettingsError among them), or an engine gone
        fail(str(exc), code=2 if isinstance(exc, ValueError) else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
