"""The process both llama.cpp engines run: llama.cpp's own HTTP server (llama-server's code, from PyPI's xllamacpp
wheel: no compiler, no CMake), with llama-server's options.

It runs with the llama.cpp venv's Python (`.kit/llamacpp/bin/python THIS_FILE ...`), which has xllamacpp and
nothing of the kit: it imports nothing but the standard library and xllamacpp. The server answers on its own
threads until the process is stopped (SIGTERM from the kit's `down`, like any server it runs). The API key comes
from LLAMA_API_KEY, as llama-server reads it: on the command line it would show in `ps`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import xllamacpp


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the GGUF file")
    parser.add_argument("--alias", required=True, help="the model's name in /v1/models and in answers")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--parallel", type=int, default=1, help="slots: requests decoded together")
    parser.add_argument("--ctx-size", type=int, required=True, help="tokens of context, split among the slots")
    parser.add_argument("--threads", type=int, required=True, help="threads for decoding and for prompts")
    return parser.parse_args(argv)


def params(args: argparse.Namespace) -> xllamacpp.CommonParams:
    """llama-server's options as xllamacpp's CommonParams (the same struct llama-server fills from its flags)."""
    common = xllamacpp.CommonParams()
    common.model.path = args.model
    common.model_alias = {args.alias}
    common.hostnames = [args.host]
    common.port = args.port
    common.n_parallel = args.parallel
    common.n_ctx = args.ctx_size
    common.cpuparams.n_threads = args.threads
    common.cpuparams_batch.n_threads = args.threads
    common.endpoint_metrics = True  # Prometheus /metrics (llamacpp:* names), as llama-server's --metrics
    common.use_jinja = True  # the model's own chat template, tools included, as llama-server's --jinja
    key = os.environ.get("LLAMA_API_KEY", "")
    if key:
        common.api_keys = [key]
    return common


def main(argv: list[str]) -> None:
    args = parse(argv)
    print(f"xllamacpp {xllamacpp.__version__}: {xllamacpp.get_system_info().strip()}", flush=True)
    try:
        server = xllamacpp.Server(params(args))  # loads the model, then listens; it serves on threads of its own
    except RuntimeError as exc:  # a model that does not load, a port it cannot bind: its log lines above say which
        sys.exit(f"error: llama.cpp's server did not start ({exc}); its log lines above say why")
    print(f"serving {args.alias} on http://{args.host}:{args.port} with {args.parallel} slot(s)", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})  # until `down` stops it
    del server


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})  # sigwait receives them
    main(sys.argv[1:])
