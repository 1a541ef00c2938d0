"""The op calls one compiled decode step makes, counted in the wrapper inductor generated for it.

vLLM 0.32 compiles the whole model on CPU as one graph and saves inductor's output beside the compiled artifact
(`<VLLM_CACHE_ROOT>/torch_compile_cache/torch_aot_compile/<hash>/inductor_cache/`, the path its log names). That
output is the step: a wrapper that calls each op in turn. With inductor's Python wrapper (vLLM's default) it is a
Python function, `call(args)`, which the interpreter runs statement by statement at every step: each op call, and
each buffer it allocates or views, is Python bytecode. With the C++ wrapper (`CPP_WRAPPER`) the same calls are
compiled C++ (`*.main.cpp`), and Python runs only inside the ops that are Python themselves (vLLM's attention ops,
registered from Python, reached through the dispatcher).

    .venv/bin/python -m benchmarks.step_ops ~/.cache/vllm/torch_compile_cache/torch_aot_compile/<hash>

`benchmarks/step_profile.py` counts the ops of the engine it profiles this way and records them beside its times.
"""

from __future__ import annotations

import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ATTENTION_OP = "unified_attention_with_output"  # in every decode step's wrapper, whichever kind

# kind: (what it is, a call of it in the Python wrapper, in the C++ wrapper), one call per match
KINDS = {
    "fused_kernels": (
        "fused kernels inductor generated (norms, activations, rotary, residuals)",
        r"^\s+cpp_fused_\w+\(",
        r"^\s+cpp_fused_\w+\(",
    ),
    "linears": (
        "linears (matmuls outside inductor: zentorch, oneDNN, aten)",
        r"^\s+(?:buf\d+ = )?(?:torch\.ops\.(?:zentorch|_C|aten|onednn)\.\w+|extern_kernels\.\w+)",
        r"aoti_torch_cpu_\w+\(",
    ),
    "vllm_ops": (
        "vLLM's own ops (attention, KV-cache write)",
        r"^\s+(?:buf\d+ = )?torch\.ops\.vllm\.\w+\.default\(",
        r'findSchemaOrThrow\("vllm::\w+"',
    ),
}
PYTHON_BOOKKEEPING = r"^\s+(?:buf\d+ = (?:empty_strided_cpu|reinterpret_tensor)\(|del |assert_\w+\()"


@dataclass(frozen=True, slots=True)
class StepOps:
    """One compiled step's wrapper: its kind, its op calls by kind, and the Python statements around them."""

    wrapper: str  # "python" or "c++"
    source: str  # the generated file counted, relative to the cache folder
    op_calls: dict[str, int]  # by KINDS' key
    python_bookkeeping: int  # buffer allocations, views, `del`s and asserts the Python wrapper runs; 0 in C++

    @property
    def total_op_calls(self) -> int:
        return sum(self.op_calls.values())


def call_body(source: str) -> str:
    """The Python wrapper's `call(args)`: what runs at each step (the rest defines kernels and loads them)."""
    start = source.find("def call(")
    return source[start:] if start >= 0 else ""


def count(inductor_cache: Path) -> StepOps:
    """The step's wrapper in `inductor_cache`: the C++ one where inductor wrote one, else the Python one."""
    for path in sorted(inductor_cache.rglob("*.main.cpp")):
        text = path.read_text(errors="replace")
        if ATTENTION_OP in text:
            calls = {kind: len(re.findall(cpp, text, re.MULTILINE)) for kind, (_, _, cpp) in KINDS.items()}
            return StepOps("c++", str(path.relative_to(inductor_cache)), calls, 0)
    for path in sorted(inductor_cache.rglob("*.py")):
        body = call_body(path.read_text(errors="replace"))
        if ATTENTION_OP in body:
            calls = {kind: len(re.findall(python, body, re.MULTILINE)) for kind, (_, python, _) in KINDS.items()}
            bookkeeping = len(re.findall(PYTHON_BOOKKEEPING, body, re.MULTILINE))
            return StepOps("python", str(path.relative_to(inductor_cache)), calls, bookkeeping)
    raise FileNotFoundError(f"no compiled decode step (a wrapper calling {ATTENTION_OP}) under {inductor_cache}")


def of_artifact(artifact: Path) -> StepOps:
    """`artifact`: the compiled model's path as vLLM's log names it (`.../torch_aot_compile/<hash>/rank_0_0/model`)
    or its `<hash>` folder."""
    folder = artifact if (artifact / "inductor_cache").is_dir() else artifact.parents[1]
    return count(folder / "inductor_cache")


def as_dict(ops: StepOps) -> dict[str, object]:
    return asdict(ops) | {"total_op_calls": ops.total_op_calls}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m benchmarks.step_ops COMPILED_FOLDER", file=sys.stderr)
        return 2
    try:
        ops = of_artifact(Path(args[0]).expanduser())
    except (FileNotFoundError, IndexError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{ops.wrapper} wrapper ({ops.source}): {ops.total_op_calls} op calls a step")
    for kind, calls in ops.op_calls.items():
        print(f"  {calls:5d}  {KINDS[kind][0]}")
    if ops.python_bookkeeping:
        print(f"  {ops.python_bookkeeping:5d}  Python statements around them (buffers allocated and viewed, dels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
