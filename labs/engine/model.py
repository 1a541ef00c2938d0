"""SmolLM2-135M (a Llama) in plain PyTorch, with attention over a paged KV cache.

Per layer: project the new tokens to q, k, v; rotate q and k (RoPE); write k and v into their cache
slots; gather each sequence's whole context back from the cache by its slots (the block table turned
into slot numbers once per step, shared by all 30 layers); attend. Weights come from the prepared
checkpoint's safetensors; q/k/v and gate/up projections are concatenated so each is one matmul.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file


@dataclass(frozen=True, slots=True)
class ModelShape:
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    eos_token_id: int

    @classmethod
    def from_config(cls, path: Path) -> ModelShape:
        raw = json.loads(path.read_text())
        rope = raw.get("rope_parameters") or {}
        return cls(
            num_layers=raw["num_hidden_layers"],
            hidden_size=raw["hidden_size"],
            num_heads=raw["num_attention_heads"],
            num_kv_heads=raw["num_key_value_heads"],
            head_dim=raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"],
            vocab_size=raw["vocab_size"],
            rms_norm_eps=raw["rms_norm_eps"],
            rope_theta=rope.get("rope_theta", raw.get("rope_theta")),
            max_position_embeddings=raw["max_position_embeddings"],
            eos_token_id=raw["eos_token_id"],
        )

    @property
    def group_size(self) -> int:
        """Query heads per KV head (grouped-query attention): 9 / 3 = 3 for SmolLM2-135M."""
        return self.num_heads // self.num_kv_heads


@dataclass(frozen=True, slots=True)
class LayerWeights:
    input_norm: torch.Tensor
    qkv: torch.Tensor  # [(heads + 2 kv_heads) * head_dim, hidden]
    o: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor  # [2 * intermediate, hidden]
    down: torch.Tensor


@dataclass(slots=True)
class StepInputs:
    """One step's tensors, built by the model runner. B sequences, T new tokens each (padded), L context."""

    token_ids: torch.Tensor  # [B, T]
    positions: torch.Tensor  # [B, T]
    write_slots: torch.Tensor  # [B * T]: where each new token's k/v goes (padding -> the scratch slot)
    context_slots: torch.Tensor  # [B * L]: the slots of each sequence's whole context (padding -> scratch)
    attn_bias: torch.Tensor  # [B, 1, group * T, L]: 0 where a query may look, -inf elsewhere
    last_index: torch.Tensor  # [B]: which of the T positions holds each sequence's last new token


class SmolLM2:
    def __init__(self, model_dir: Path, dtype: torch.dtype = torch.float32) -> None:
        self.shape = ModelShape.from_config(model_dir / "config.json")
        self.dtype = dtype
        weights = {name: tensor.to(dtype) for name, tensor in load_file(model_dir / "model.safetensors").items()}
        self.embed = weights["model.embed_tokens.weight"]
        self.lm_head = weights.get("lm_head.weight", self.embed)  # tied embeddings
        self.final_norm = weights["model.norm.weight"]
        self.layers = [self._layer(weights, f"model.layers.{index}.") for index in range(self.shape.num_layers)]
        self.rope_cos, self.rope_sin = self._rope_tables()

    @staticmethod
    def _layer(weights: dict[str, torch.Tensor], prefix: str) -> LayerWeights:
        attn, mlp = prefix + "self_attn.", prefix + "mlp."
        return LayerWeights(
            input_norm=weights[prefix + "input_layernorm.weight"],
            qkv=torch.cat([weights[attn + name + ".weight"] for name in ("q_proj", "k_proj", "v_proj")]),
            o=weights[attn + "o_proj.weight"],
            post_norm=weights[prefix + "post_attention_layernorm.weight"],
            gate_up=torch.cat([weights[mlp + "gate_proj.weight"], weights[mlp + "up_proj.weight"]]),
            down=weights[mlp + "down_proj.weight"],
        )

    def _rope_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        dim = self.shape.head_dim
        inv_freq = 1.0 / (self.shape.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        positions = torch.arange(self.shape.max_position_embeddings, dtype=torch.float32)
        freqs = torch.outer(positions, inv_freq)
        angles = torch.cat([freqs, freqs], dim=-1)
        return angles.cos().to(self.dtype), angles.sin().to(self.dtype)

    def new_kv_cache(self, num_slots: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, K and V for `num_slots` token slots (+1 scratch slot that padding writes into)."""
        shape = (num_slots + 1, self.shape.num_kv_heads, self.shape.head_dim)
        return [
            (torch.zeros(shape, dtype=self.dtype), torch.zeros(shape, dtype=self.dtype))
            for _ in range(self.shape.num_layers)
        ]

    def _rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.shape.rms_norm_eps)
        return weight * x32.to(self.dtype)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    @torch.inference_mode()
    def forward(self, inputs: StepInputs, kv_cache: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Logits [B, vocab] for each sequence's last new token; writes the new tokens' k/v into kv_cache."""
        shape = self.shape
        batch, num_new = inputs.token_ids.shape
        num_context = inputs.context_slots.numel() // batch
        cos = self.rope_cos[inputs.positions].unsqueeze(2)  # [B, T, 1, D]
        sin = self.rope_sin[inputs.positions].unsqueeze(2)
        q_size, kv_size = shape.num_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
        hidden = self.embed[inputs.token_ids]
        for layer, (k_cache, v_cache) in zip(self.layers, kv_cache, strict=True):
            qkv = F.linear(self._rms_norm(hidden, layer.input_norm), layer.qkv)
            q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
            q = self._rotate(q.view(batch, num_new, shape.num_heads, shape.head_dim), cos, sin)
            k = self._rotate(k.view(batch, num_new, shape.num_kv_heads, shape.head_dim), cos, sin)
            k_cache.index_copy_(0, inputs.write_slots, k.reshape(-1, shape.num_kv_heads, shape.head_dim))
            v_cache.index_copy_(0, inputs.write_slots, v.reshape(-1, shape.num_kv_heads, shape.head_dim))
            keys = k_cache.index_select(0, inputs.context_slots).view(batch, num_context, shape.num_kv_heads, -1)
            values = v_cache.index_select(0, inputs.context_slots).view(batch, num_context, shape.num_kv_heads, -1)
            attn = self._attend(q, keys.transpose(1, 2), values.transpose(1, 2), inputs.attn_bias)
            hidden = hidden + F.linear(attn, layer.o)
            gate, up = F.linear(self._rms_norm(hidden, layer.post_norm), layer.gate_up).chunk(2, dim=-1)
            hidden = hidden + F.linear(F.silu(gate) * up, layer.down)
        last = hidden[torch.arange(batch), inputs.last_index]
        return F.linear(self._rms_norm(last, self.final_norm), self.lm_head).float()

    def _attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Grouped-query attention without copying K/V per query head: the `group` query heads that share
        a KV head are folded into the query-length axis, [B, KV, group * T, D] against [B, KV, L, D]."""
        batch, num_new, _, dim = q.shape
        shape = self.shape
        folded = q.view(batch, num_new, shape.num_kv_heads, shape.group_size, dim).permute(0, 2, 3, 1, 4)
        folded = folded.reshape(batch, shape.num_kv_heads, shape.group_size * num_new, dim)
        out = F.scaled_dot_product_attention(folded, keys, values, attn_mask=bias)
        out = out.view(batch, shape.num_kv_heads, shape.group_size, num_new, dim).permute(0, 3, 1, 2, 4)
        return out.reshape(batch, num_new, shape.num_heads * dim)
