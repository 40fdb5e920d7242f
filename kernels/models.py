"""The published model configurations the built-in workloads take their shapes from.

Each :class:`Model` keeps the fields of one model's config under the names its config file
uses (Hugging Face ``config.json``; for the ASR encoders, the encoder section of the
Transformers/NeMo config), and workloads read shapes through those names, so a case says
which model and which fields it stands for. Every case built from a model carries the
model's ``name`` as its ``model`` parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Model:
    """One model's published config: ``source`` says where ``config`` comes from."""

    name: str
    source: str
    config: Mapping[str, int | float | str | bool]

    def __getitem__(self, field: str) -> int:
        value = self.config[field]
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{self.name} config field {field!r} is {value!r}, not a size")
        return value

    def value(self, field: str) -> int | float | str | bool:
        """A field that is not a size (a gate's name, a scaling factor)."""
        return self.config[field]


LLAMA_3_1_8B = Model(
    "llama-3.1-8b",
    "meta-llama/Llama-3.1-8B config.json",
    {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
)
LLAMA_3_1_70B = Model(
    "llama-3.1-70b",
    "meta-llama/Llama-3.1-70B config.json",
    {
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
)
MISTRAL_SMALL_24B = Model(
    "mistral-small-24b",
    "mistralai/Mistral-Small-24B-Instruct-2501 config.json",
    {
        "hidden_size": 5120,
        "intermediate_size": 32768,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
)
#: Sliding-window attention in every layer (its config's ``sliding_window``); the config has
#: no ``head_dim``: hidden_size / num_attention_heads.
MISTRAL_7B = Model(
    "mistral-7b-v0.1",
    "mistralai/Mistral-7B-v0.1 config.json",
    {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "sliding_window": 4096,
    },
)
MIXTRAL_8X7B = Model(
    "mixtral-8x7b",
    "mistralai/Mixtral-8x7B-v0.1 config.json",
    {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
)
QWEN3_30B_A3B = Model(
    "qwen3-30b-a3b",
    "Qwen/Qwen3-30B-A3B config.json",
    {
        "hidden_size": 2048,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "norm_topk_prob": True,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
    },
)
DEEPSEEK_V3 = Model(
    "deepseek-v3",
    "deepseek-ai/DeepSeek-V3 config.json (quantization_config.weight_block_size [128, 128])",
    {
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "n_routed_experts": 256,
        "num_experts_per_tok": 8,
        "n_group": 8,
        "topk_group": 4,
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "num_attention_heads": 128,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "weight_block_size": 128,
    },
)
# Streaming and offline speech recognition encoders: hidden size, the depthwise conv's kernel
# and the time subsampling after the 10 ms mel hop (so one encoder frame is
# 10 ms x subsampling_factor).
PARAKEET_CTC_1_1B = Model(
    "parakeet-ctc-1.1b",
    "nvidia/parakeet-ctc-1.1b config.json encoder_config (FastConformer XXL)",
    {"hidden_size": 1024, "conv_kernel_size": 9, "subsampling_factor": 8},
)
FASTCONFORMER_LARGE = Model(
    "fastconformer-large",
    "NeMo FastConformer-CTC Large encoder config",
    {"d_model": 512, "conv_kernel_size": 9, "subsampling_factor": 8},
)
CONFORMER_LARGE = Model(
    "conformer-large",
    "NeMo Conformer-CTC Large encoder config (stt_en_conformer_ctc_large)",
    {"d_model": 512, "conv_kernel_size": 31, "subsampling_factor": 4},
)

#: The dense decoders, for the GEMM and attention workloads.
DENSE = (LLAMA_3_1_8B, LLAMA_3_1_70B, MISTRAL_SMALL_24B)

#: The mel front end's hop, seconds: an encoder frame lasts this times the subsampling.
MEL_HOP_S = 0.01

#: Tokens in flight at decode (per sequence batch, or per expert) and in a prefill chunk.
DECODE_TOKENS = (1, 8, 32, 64)
PREFILL_TOKENS = (2048, 8192)


def dense_projections(model: Model) -> tuple[tuple[str, int, int], ...]:
    """``(weight, in_features, out_features)`` of a dense decoder layer's linear layers,
    with q, k and v fused and gate and up fused, as serving engines load them."""
    hidden, head_dim = model["hidden_size"], model["head_dim"]
    heads, kv_heads = model["num_attention_heads"], model["num_key_value_heads"]
    intermediate = model["intermediate_size"]
    return (
        ("qkv_proj", hidden, (heads + 2 * kv_heads) * head_dim),
        ("o_proj", heads * head_dim, hidden),
        ("gate_up_proj", hidden, 2 * intermediate),
        ("down_proj", intermediate, hidden),
    )
