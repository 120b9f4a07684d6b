"""Write checks/model_concepts.toml from a transformers source tree: the config.json keys
each concept of the decoder count goes by, each with the configuration file that declares it.

    python -m tools.modelconcepts /path/to/transformers [--check]

``/path/to/transformers`` is the package directory (an unpacked wheel: ``pip download
--no-deps transformers`` and unzip it). Each ``models/*/configuration_*.py`` is read with
``ast``: the annotated class attributes (``hidden_size: int = 4096``) and the
``attribute_map`` aliases (``{"hidden_size": "n_embd"}``, transformers' own table of which
key a model names a common concept by). A key in SPEC below is written with the first
configuration file (in PREFERRED order, then alphabetical) that declares it or maps a
concept to it; a key no configuration file has needs a publisher's config.json as its
source (PUBLISHER), or the run fails. ``--check`` compares with the shipped file instead of
writing it, and lists what transformers has that SPEC leaves out (the candidates: an
attribute whose name matches the concept's pattern), so a new release's names are seen.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "checks" / "model_concepts.toml"


@dataclass(frozen=True)
class Spec:
    name: str
    kind: str  # count, flag, list, nested, activation, placement, layer-kinds
    what: str
    keys: tuple[str, ...]
    pattern: str  # attribute names transformers has that may belong here (--check lists them)


SPEC = (
    Spec(
        "hidden_size",
        "count",
        "the width of the residual stream",
        ("hidden_size", "d_model", "n_embd"),
        r"^(hidden_size|d_model|n_embd|dim|hidden_dim|emb_dim|embed_dim)$",
    ),
    Spec(
        "num_layers",
        "count",
        "decoder layers",
        ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
        r"^(num_hidden_layers|n_layers?|num_layers|layers)$",
    ),
    Spec(
        "num_attention_heads",
        "count",
        "query heads of each attention layer",
        ("num_attention_heads", "n_head", "n_heads", "num_heads"),
        r"^(num_attention_heads|n_heads?|num_heads|attention_heads)$",
    ),
    Spec(
        "num_kv_heads",
        "count",
        "key/value heads (grouped-query attention); absent: as many as the query heads",
        ("num_key_value_heads", "num_kv_heads", "n_head_kv"),
        r"^(num_key_value_heads|num_kv_heads|n_head_kv|kv_n_heads|num_attention_groups)$",
    ),
    Spec(
        "multi_query",
        "flag",
        "one key/value head shared by every query head (multi-query attention)",
        ("multi_query",),
        r"^multi_query$",
    ),
    Spec(
        "head_dim",
        "count",
        "width of one attention head; absent: hidden size / heads",
        ("head_dim", "attention_head_dim", "kv_channels"),
        r"^(head_dim|attention_head_dim|kv_channels|d_head|dim_head)$",
    ),
    Spec("vocab_size", "count", "rows of the embedding table", ("vocab_size",), r"^vocab_size$"),
    Spec(
        "intermediate_size",
        "count",
        "inner width of a dense MLP (GPT-2's n_inner: null means 4 x hidden)",
        ("intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim"),
        r"^(intermediate_size|ffn_hidden_size|n_inner|ffn_dim|d_ff|mlp_dim)$",
    ),
    Spec(
        "expert_intermediate_size",
        "count",
        "inner width of one routed expert; absent: intermediate_size",
        ("moe_intermediate_size", "expert_ffn_hidden_size"),
        r"^(moe_intermediate_size|expert_ffn_hidden_size|expert_intermediate_size)$",
    ),
    Spec(
        "shared_expert_intermediate_size",
        "count",
        "inner width of the always-active shared expert, when it has its own",
        (
            "shared_expert_intermediate_size",
            "moe_shared_expert_intermediate_size",
            "shared_experts_intermediate_size",
        ),
        r"shared_experts?_intermediate_size$",
    ),
    Spec(
        "experts",
        "count",
        "routed experts in each MoE layer",
        ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"),
        r"^(num_experts|n_routed_experts|num_local_experts|moe_num_experts)$",
    ),
    Spec(
        "experts_per_token",
        "count",
        "routed experts each token uses",
        (
            "num_experts_per_tok",
            "num_experts_per_token",
            "experts_per_token",
            "moe_k",
            "moe_topk",
            "moe_top_k",
            "top_k_experts",
        ),
        r"^(num_experts_per_tok(en)?|experts_per_token|moe_k|moe_top_?k|top_k_experts)$",
    ),
    Spec(
        "shared_experts",
        "count",
        "always-active experts in each MoE layer",
        ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"),
        r"^(n_shared_experts|num_shared_experts|moe_num_shared_experts)$",
    ),
    Spec(
        "dense_placement",
        "placement",
        "which layers are dense and which MoE (each key read as its configuration class does)",
        (
            "first_k_dense_replace",
            "moe_layer_freq",
            "decoder_sparse_step",
            "mlp_only_layers",
            "interleave_moe_layer_step",
            "moe_layer_start_index",
            "moe_layer_end_index",
            "moe_layer_interval",
            "mlp_layer_types",
        ),
        r"first_k_dense|moe_layer|sparse_step|mlp_only|interleave_moe|mlp_layer_types",
    ),
    Spec(
        "layer_types",
        "layer-kinds",
        "each layer's attention kind: full, sliding-window or linear",
        ("layer_types", "sliding_window_pattern", "full_attention_interval"),
        r"^(layer_types|sliding_window_pattern|full_attention_interval)$",
    ),
    Spec(
        "sliding_window",
        "count",
        "tokens a sliding-window layer keeps",
        ("sliding_window", "sliding_window_size"),
        r"^(sliding_window|sliding_window_size)$",
    ),
    Spec(
        "tied_embeddings",
        "flag",
        "the output head is the embedding table",
        ("tie_word_embeddings",),
        r"^tie_word_embeddings$",
    ),
    Spec(
        "nested_config",
        "nested",
        "the language model's own config inside a multimodal one",
        ("text_config", "llm_config", "language_config"),
        r"^(text_config|llm_config|language_config)$",
    ),
    Spec(
        "activation",
        "activation",
        "the MLP's activation: SiLU/SwiGLU means a gated MLP (gate, up, down)",
        ("hidden_act", "activation_function", "hidden_activation"),
        r"^(hidden_act|activation_function|hidden_activation)$",
    ),
    Spec(
        "attention_bias",
        "flag",
        "biases on the attention projections",
        ("attention_bias", "qkv_bias", "use_qkv_bias", "use_bias", "bias"),
        r"^(attention_bias|qkv_bias|use_qkv_bias|use_bias|bias)$",
    ),
    Spec(
        "qk_norm",
        "flag",
        "RMS norms on the queries and keys",
        ("use_qk_norm", "qk_layernorm"),
        r"^(use_qk_norm|qk_layernorm|qk_norm)$",
    ),
    Spec(
        "mla",
        "count",
        "multi-head latent attention (DeepSeek): its ranks and head widths",
        ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"),
        r"^(kv_lora_rank|q_lora_rank|qk_rope_head_dim|qk_nope_head_dim|v_head_dim)$",
    ),
    Spec(
        "max_positions",
        "count",
        "the longest context the model was trained for",
        ("max_position_embeddings", "n_positions"),
        r"^(max_position_embeddings|n_positions)$",
    ),
)

# Keys no transformers configuration class declares (an annotated attribute or an attribute_map
# alias), each with a publisher's file that uses it, read at a pinned commit (repo@commit:path).
PUBLISHER = {
    "n_head_kv": "tiiuae/falcon-40b-instruct@662a9a4 (refs/pr/64):config.json (the publisher's"
    " RWForCausalLM config: 'model_type': 'RefinedWeb', 'n_head_kv': 8; FalconConfig calls it"
    " num_kv_heads)",
    "llm_config": "OpenGVLab/InternVL@22839cef8aa46925b45db2d3d6f72f63d237bb0f"
    ":internvl_chat/internvl/model/internvl_chat/configuration_internvl_chat.py"
    " (InternVLChatConfig builds the language model from llm_config and to_dict writes it);"
    " a config.json with it: OpenGVLab/InternVL2-8B-MPO@1e37f9fb4d7a37e02819b450d163e512ce406bb4"
    ":config.json ('llm_config': {'architectures': ['InternLM2ForCausalLM'], ...})",
    "language_config": "deepseek-ai/DeepSeek-VL@d04d289cb8ef9e1e02f7e4eae7e817d572dcb07f"
    ":deepseek_vl/models/modeling_vlm.py (MultiModalityConfig reads"
    " kwargs.get('language_config') into a LlamaConfig)",
    "experts_per_token": "openai/gpt-oss@a194b990f370fe9976bed6e6468a6d549b13c2fd"
    ":gpt_oss/torch/model.py (ModelConfig(**json.load(config.json)) with"
    " experts_per_token: int = 4, read from the checkpoint's original/config.json)",
    "moe_layer_freq": "deepseek-ai/DeepSeek-VL2@1d57bba212ebf6e24ab1b8f0e2f0529b40bfba1e"
    ":deepseek_vl2/models/configuration_deepseek.py (DeepseekV2Config(moe_layer_freq=1):"
    " one expert layer for every moe_layer_freq - 1 dense layers)",
    "full_attention_interval": "huggingface/transformers@249ef8164cfbd8e288c2f6d8395539b9e90e8300"
    ":src/transformers/models/qwen3_next/configuration_qwen3_next.py (layer_types built from"
    " kwargs.get('full_attention_interval', 4): every 4th layer full attention)",
}

# Where a key is cited from when several files declare it: the best-known decoder first.
PREFERRED = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3_moe",
    "qwen3_next",
    "deepseek_v3",
    "gemma3",
    "gpt2",
    "gpt_bigcode",
    "falcon",
    "stablelm",
    "ernie4_5_moe",
    "hunyuan_v1_moe",
    "llama4",
    "dbrx",
)


def declarations(tree: Path) -> dict[str, list[str]]:
    """key -> the model directories whose configuration classes declare it (an annotated
    attribute or an attribute_map value)."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(tree.glob("models/*/configuration_*.py")):
        try:
            module = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        model = path.parent.name
        for node in ast.walk(module):
            if not isinstance(node, ast.ClassDef):
                continue
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    found[st.target.id].add(model)
                elif isinstance(st, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "attribute_map" for t in st.targets
                ):
                    try:
                        amap = ast.literal_eval(st.value)
                    except ValueError:
                        continue
                    if isinstance(amap, dict):
                        for alias in amap.values():
                            if isinstance(alias, str):
                                found[alias].add(model)
    rank = {m: i for i, m in enumerate(PREFERRED)}
    return {k: sorted(v, key=lambda m: (rank.get(m, len(rank)), m)) for k, v in found.items()}


def _version(tree: Path) -> str:
    init = (tree / "__init__.py").read_text(encoding="utf-8")
    m = re.search(r'__version__\s*=\s*"([^"]+)"', init)
    return m.group(1) if m else "unknown"


def render(tree: Path) -> str:
    found = declarations(tree)
    version = _version(tree)
    out = [
        "# The config.json keys each concept of the decoder count goes by, across the ecosystem:",
        "# written by tools/modelconcepts.py from transformers' configuration_*.py (annotated",
        "# attributes and attribute_map aliases), each key with the file that declares it, or",
        "# with a publisher's config.json where no transformers class has it. The count reads",
        "# the first key of a concept that a config.json has (collect/model/config.py).",
        "# kind: count (a whole number), flag (true/false), list, nested (a config object),",
        "# activation (a name), placement and layer-kinds (each key read by its own rule).",
        "# Do not edit by hand: change SPEC in the tool and run it again.",
        "schema_version = 1",
        f'source = "transformers {version} (models/*/configuration_*.py)"',
        "",
    ]
    missing = []
    for spec in SPEC:
        out += [
            "[[concept]]",
            f'name = "{spec.name}"',
            f'kind = "{spec.kind}"',
            f'what = "{spec.what}"',
            "keys = [",
        ]
        for key in spec.keys:
            if key in found:
                model = found[key][0]
                src = f"transformers {version} models/{model}/configuration_{model}.py"
            elif key in PUBLISHER:
                src = PUBLISHER[key]
            else:
                missing.append(key)
                continue
            out.append(f'  {{ key = "{key}", source = "{src}" }},')
        out += ["]", ""]
    if missing:
        raise SystemExit(f"no source for {', '.join(missing)}: add it to PUBLISHER")
    return "\n".join(out)


def candidates(tree: Path) -> list[str]:
    """Attributes transformers declares that match a concept's pattern but SPEC leaves out."""
    found = declarations(tree)
    lines = []
    for spec in SPEC:
        extra = sorted(k for k in found if re.search(spec.pattern, k) and k not in spec.keys)
        if extra:
            lines.append(f"{spec.name}: not in SPEC: {', '.join(extra)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("transformers", type=Path, help="the transformers package directory")
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    text = render(args.transformers)
    if args.check:
        for line in candidates(args.transformers):
            print(line)
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.relative_to(ROOT)} differs from what the tool writes", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
