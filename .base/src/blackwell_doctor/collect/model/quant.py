"""Which quantization a checkpoint uses, from its description and its tensors.

Descriptions recognised (exact published layouts, see tests/fixtures/models/README.md):

- ModelOpt, legacy ``hf_quant_config.json``: ``{"producer": {"name": "modelopt"},
  "quantization": {"quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": ...,
  "exclude_modules": [...]}}``; newer exports put the same in config.json's
  ``quantization_config`` with ``"quant_method": "modelopt"`` and ``config_groups``.
- compressed-tensors (llm-compressor): ``"quant_method": "compressed-tensors"`` with
  ``"format": "nvfp4-pack-quantized"`` (NVFP4), ``"float-quantized"`` (FP8),
  ``"pack-quantized"`` (W4A16 integer), per group in ``config_groups``.
- ``"quant_method": "fp8"`` (DeepSeek's 128x128 block FP8), ``"mxfp4"`` (gpt-oss),
  ``"awq"`` and ``"gptq"`` (W4A16).

The tensors confirm it: NVFP4 weights are U8 (two E2M1 values a byte) beside an F8_E4M3
scale with one column per 16 weights; FP8 weights are F8_E4M3; W4A16 weights are I32
``qweight``/``weight_packed`` (eight 4-bit values each).
"""

from __future__ import annotations

from typing import Any

from blackwell_doctor.facts.model import QuantFacts, QuantMethod


def _groups(q: dict[str, Any]) -> list[dict[str, Any]]:
    groups = q.get("config_groups")
    if not isinstance(groups, dict):
        return []
    return [g for g in groups.values() if isinstance(g, dict)]


def _weights(group: dict[str, Any]) -> dict[str, Any]:
    w = group.get("weights")
    return w if isinstance(w, dict) else {}


def describe(
    config_quant: dict[str, Any] | None, hf_quant: dict[str, Any] | None
) -> tuple[QuantFacts, str | None]:
    """The quantization a description declares, and a problem text when it is unknown."""
    if hf_quant is not None:
        inner = hf_quant.get("quantization")
        if isinstance(inner, dict):
            algo = str(inner.get("quant_algo") or "").upper()
            producer = hf_quant.get("producer")
            who = producer.get("name") if isinstance(producer, dict) else None
            return _modelopt(
                algo,
                inner.get("group_size"),
                inner.get("kv_cache_quant_algo"),
                f"hf_quant_config.json: producer {who or '?'}, quantization.quant_algo = "
                f"{inner.get('quant_algo')!r}, group_size = {inner.get('group_size')!r}",
            )
    if config_quant is None:
        return QuantFacts(
            method="unquantized",
            format="none",
            evidence=[
                "config.json has no quantization_config and there is no hf_quant_config.json"
            ],
        ), None
    method = str(config_quant.get("quant_method") or "").lower()
    if method in ("modelopt", "modelopt_fp4") or (not method and "quant_algo" in config_quant):
        algo = str(config_quant.get("quant_algo") or "").upper()
        group = config_quant.get("group_size")
        for g in _groups(config_quant):
            group = group or _weights(g).get("group_size")
        return _modelopt(
            algo,
            group,
            config_quant.get("kv_cache_quant_algo"),
            f"config.json quantization_config: quant_method {method or '(none)'!r}, "
            f"quant_algo {config_quant.get('quant_algo')!r}",
        )
    if method == "compressed-tensors":
        return _compressed_tensors(config_quant)
    if method == "fp8":
        block = config_quant.get("weight_block_size")
        shape = (
            f" block {block[0]}x{block[1]}" if isinstance(block, list) and len(block) == 2 else ""
        )
        return _recognised(
            "fp8",
            "fp8" + shape,
            None,
            None,
            f"config.json quantization_config: quant_method 'fp8', fmt "
            f"{config_quant.get('fmt')!r}, weight_block_size {block!r}",
        )
    if method == "mxfp4":  # one E8M0 scale per 32 elements, whatever the file says
        return _recognised(
            "mxfp4", "mxfp4", 32, None, "config.json quantization_config: quant_method 'mxfp4'"
        )
    if method in ("awq", "gptq"):
        bits = config_quant.get("bits", config_quant.get("w_bit"))
        group = config_quant.get("group_size", config_quant.get("q_group_size"))
        version = config_quant.get("version") or config_quant.get("checkpoint_format") or ""
        if bits == 4:
            return _recognised(
                "w4a16",
                f"{method} {version}".strip(),
                group,
                None,
                f"config.json quantization_config: quant_method {method!r}, bits 4, "
                f"group_size {group!r}",
            )
    fmt = f"quant_method {method or '(none)'!r}"
    return QuantFacts(
        method="unknown",
        format=fmt,
        evidence=[f"config.json quantization_config: {fmt}"],
    ), f"unrecognised quantization description ({fmt}): sizes come from the tensors only"


_WEIGHT_BITS: dict[QuantMethod, int] = {"nvfp4": 4, "mxfp4": 4, "w4a16": 4, "fp8": 8}


def _recognised(
    method: QuantMethod, fmt: str, group: Any, kv_dtype: str | None, evidence: str
) -> tuple[QuantFacts, None]:
    """A description whose method is known. Only the 4-bit formats scale per group of
    weights; FP8 scales per tensor, channel or block, so it has no group size."""
    bits = _WEIGHT_BITS[method]
    return QuantFacts(
        method=method,
        format=fmt,
        group_size=group if bits == 4 and type(group) is int else None,
        weight_bits=bits,
        kv_cache_dtype=kv_dtype,
        evidence=[evidence],
    ), None


# ModelOpt's 4-bit quant_algo values and the method each is (FP8* are matched by prefix).
_MODELOPT_4BIT: dict[str, QuantMethod] = {
    "NVFP4": "nvfp4",
    "NVFP4_AWQ": "nvfp4",
    "W4A16_AWQ": "w4a16",
    "W4A8_AWQ": "w4a16",
    "INT4_AWQ": "w4a16",
}


def _modelopt(algo: str, group: Any, kv: Any, evidence: str) -> tuple[QuantFacts, str | None]:
    kv_dtype = "fp8" if str(kv or "").upper() == "FP8" else None
    method = _MODELOPT_4BIT.get(algo)
    if method is None and algo.startswith("FP8"):
        method = "fp8"
    if method is None:
        return QuantFacts(
            method="unknown", format=f"modelopt {algo or '(none)'}", evidence=[evidence]
        ), (
            f"unrecognised ModelOpt quant_algo {algo or '(none)'!r}: sizes come from the "
            "tensors only"
        )
    return _recognised(method, f"modelopt {algo}", group, kv_dtype, evidence)


def _compressed_tensors(q: dict[str, Any]) -> tuple[QuantFacts, str | None]:
    fmts = {str(q.get("format") or "")}
    fmts |= {str(g.get("format")) for g in _groups(q) if g.get("format")}
    fmts.discard("")
    weights = [_weights(g) for g in _groups(q)]
    kv = q.get("kv_cache_scheme")
    kv_dtype = "fp8" if isinstance(kv, dict) and kv.get("num_bits") == 8 else None
    ev = (
        f"config.json quantization_config: quant_method 'compressed-tensors', format "
        f"{', '.join(sorted(fmts)) or '(none)'}; weights "
        + "; ".join(
            f"{w.get('type')} {w.get('num_bits')}-bit group_size {w.get('group_size')}"
            for w in weights
        )
    )
    groups = {g for w in weights if type(g := w.get("group_size")) is int}
    group = min(groups) if groups else None
    if "nvfp4-pack-quantized" in fmts or any(
        w.get("type") == "float" and w.get("num_bits") == 4 for w in weights
    ):
        return _recognised("nvfp4", "compressed-tensors nvfp4-pack-quantized", group, kv_dtype, ev)
    if "float-quantized" in fmts or any(
        w.get("type") == "float" and w.get("num_bits") == 8 for w in weights
    ):
        return _recognised("fp8", "compressed-tensors float-quantized", group, kv_dtype, ev)
    if any(w.get("type") == "int" and w.get("num_bits") == 4 for w in weights):
        return _recognised("w4a16", "compressed-tensors pack-quantized", group, kv_dtype, ev)
    return QuantFacts(method="unknown", format="compressed-tensors", evidence=[ev]), (
        f"unrecognised compressed-tensors scheme ({', '.join(sorted(fmts)) or 'no format'})"
    )


# ---------------------------------------------------------------- what the tensors say

# Tensors that carry scales, zero points or shapes of quantized weights: bytes, not
# parameters.
NOT_PARAMETERS = (
    "weight_scale",
    "weight_scale_2",
    "weight_scale_inv",
    "input_scale",
    "weight_global_scale",
    "input_global_scale",
    "weight_zero_point",
    "weight_shape",
    "k_scale",
    "v_scale",
    "q_scale",
    "output_scale",
    "qzeros",
    "g_idx",
    "scales",
    "_scales",
    "zeros",
)


_NOT_PARAMETERS = frozenset(NOT_PARAMETERS)


def is_parameter_suffix(last: str) -> bool:
    """Whether a tensor whose name ends in ``.last`` holds parameters (not scales)."""
    return last not in _NOT_PARAMETERS and not last.endswith("_scales")


def is_parameter(name: str) -> bool:
    return is_parameter_suffix(name.rsplit(".", 1)[-1])


def values_per_element(last: str, dtype: str, method: str) -> int:
    """How many weights one stored element of a tensor named ``*.last`` holds (packing)."""
    if dtype == "U8" and (method in ("nvfp4", "mxfp4") or last.endswith("_blocks")):
        return 2  # two E2M1 values per byte
    if dtype == "I32" and (last in ("qweight", "weight_packed") or method == "w4a16"):
        return 8  # eight 4-bit integers per int32
    return 1
