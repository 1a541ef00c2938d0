"""Decode throughput of the teaching engine vs plain Hugging Face `generate`, side by side in one run.

Same checkpoint, same dtype, same threads, same prompts, every sequence forced to decode exactly
`--new-tokens` tokens. Output tokens per second = batch x new tokens / wall time (prefill included in both).
Runs alternate (engine, HF, engine, HF ...) so background load hits both alike; the best of `--repeats`
counts. Goal of the course: the engine reaches at least 70% of HF at batch 16 and 32.

    .kit/vllm/bin/python -m benchmarks.engine_speed --dtype bfloat16
"""

from __future__ import annotations

import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from labs.engine.config import THREADS, EngineConfig, add_flags
from labs.engine.llm_engine import LLMEngine
from labs.engine.model import SmolLM2
from labs.engine.model_runner import DTYPES
from labs.engine.sequence import SamplingParams
from serve.config.model import MODEL_DIR
from ui.cli import KitArgumentParser, positive_int

GOAL_RATIO = 0.70
PROMPT = "Explain in a few sentences why a serving engine batches requests."


def engine_tok_s(model: SmolLM2, prompt_ids: list[int], batch: int, new_tokens: int, dtype: str) -> float:
    engine = LLMEngine(EngineConfig(max_batch_size=batch, num_blocks=batch * 16, max_model_len=256, dtype=dtype), model)
    params = SamplingParams(max_tokens=new_tokens, ignore_eos=True)
    start = time.perf_counter()
    outputs = engine.generate([prompt_ids] * batch, params)
    elapsed_s = time.perf_counter() - start
    assert all(len(out) == new_tokens for out in outputs)
    return batch * new_tokens / elapsed_s


@torch.inference_mode()
def hf_tok_s(hf_model: torch.nn.Module, prompt_ids: list[int], batch: int, new_tokens: int) -> float:
    input_ids = torch.tensor([prompt_ids] * batch)
    start = time.perf_counter()
    out = hf_model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=2,
    )
    elapsed_s = time.perf_counter() - start
    assert out.shape[1] - len(prompt_ids) == new_tokens
    return batch * new_tokens / elapsed_s


def main() -> None:
    parser = KitArgumentParser(description=__doc__.split("\n")[0])
    add_flags(parser, ("dtype",), dtype={"default": "bfloat16"})
    parser.add_argument("--batches", default="16,32", help="comma-separated batch sizes")
    parser.add_argument("--new-tokens", type=positive_int, default=64)
    parser.add_argument("--repeats", type=positive_int, default=2)
    THREADS.add_to(parser, torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    prompt_ids = list(
        tokenizer.apply_chat_template(
            [{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
    )
    model = SmolLM2(MODEL_DIR, DTYPES[args.dtype])
    hf_model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=DTYPES[args.dtype]).eval()
    print(
        f"dtype {args.dtype}, threads {args.threads}, prompt {len(prompt_ids)} tokens, "
        f"{args.new_tokens} new tokens forced, best of {args.repeats}"
    )
    print(f"{'batch':>5}  {'engine tok/s':>12}  {'HF tok/s':>9}  {'ratio':>6}  goal >= {GOAL_RATIO:.0%}")
    for batch in (int(value) for value in args.batches.split(",")):
        engine_runs, hf_runs = [], []
        for _ in range(args.repeats):
            engine_runs.append(engine_tok_s(model, prompt_ids, batch, args.new_tokens, args.dtype))
            hf_runs.append(hf_tok_s(hf_model, prompt_ids, batch, args.new_tokens))
        ratio = max(engine_runs) / max(hf_runs)
        verdict = "met" if ratio >= GOAL_RATIO else "MISSED"
        print(f"{batch:>5}  {max(engine_runs):>12.1f}  {max(hf_runs):>9.1f}  {ratio:>6.2f}  {verdict}", flush=True)


if __name__ == "__main__":
    main()
