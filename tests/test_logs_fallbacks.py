"""checks/log_fallbacks.toml (issue 33, item 4): the runtimes' own fallback warnings, mined
from their sources by tools/logvocab/fallbacks.py. Its parsers on small snippets of each
language, its word rule, and every generated rule through the real scanner."""

from __future__ import annotations

import json
import logging
import re
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
from tools.logvocab import fallbacks as fb

from blackwell_doctor.collect.logs.scan import scan_sources
from blackwell_doctor.ruledata import logs, records
from blackwell_doctor.ruledata.checkdata import CatalogueError, read_shipped
from blackwell_doctor.ruledata.logs import FALLBACKS_FILE, load_catalogue, parse_catalogue
from blackwell_doctor.ruledata.resources import data_dir
from blackwell_doctor.rules.logs import judge_findings
from tests.cli import run

W = None  # a wildcard part: where the runtime substitutes a value
# A composed vLLM-style record prefix for the lines rendered from a rule.
PREFIX = "WARNING 11-28 07:00:00 [composed.py:1] "


def _raw() -> dict[str, Any]:
    return tomllib.loads((data_dir("checks") / FALLBACKS_FILE).read_text("utf-8"))


def _one(calls: list[fb.Call]) -> fb.Call:
    assert len(calls) == 1, calls
    return calls[0]


def _py(src: str) -> list[fb.Call]:
    return list(fb.python_calls(textwrap.dedent(src), "m.py"))


def _c(src: str) -> list[fb.Call]:
    return list(fb.c_calls(textwrap.dedent(src), "m.cpp"))


def _rs(src: str) -> list[fb.Call]:
    return list(fb.rust_calls(textwrap.dedent(src), "m.rs"))


# --------------------------------------------------------------------------- Python


def test_python_f_string_values_are_wildcards() -> None:
    call = _one(_py('logger.warning(f"FA3 is not supported on {arch}, falling back to {b!r}.")'))
    assert call.level == "warning"
    assert call.parts == ("FA3 is not supported on ", W, ", falling back to ", W, ".")
    assert call.line == 1


def test_python_percent_format_with_arguments_substitutes() -> None:
    call = _one(_py('logger.warning_once("Layer %s is not supported by %s, %d%% done", a, b, c)'))
    assert call.parts == ("Layer ", W, " is not supported by ", W, ", ", W, "% done")


def test_python_percent_without_arguments_is_printed_as_is() -> None:
    # logging formats only when it is given arguments; warnings.warn never does.
    assert _one(_py('logger.warning("100% slower")')).parts == ("100% slower",)
    assert _one(_py('warnings.warn("5%s slower", UserWarning)')).parts == ("5%s slower",)


def test_python_format_join_and_percent_operator() -> None:
    src = """
        logger.warning("using {} {{x}} instead".format(a))
        logger.warning("A " + name + " falls back")
        logger.info("disabled %s" % (x,))
        logger.warning(msg)
    """
    calls = _py(src)
    assert [c.parts for c in calls] == [
        ("using ", W, " {x} instead"),
        ("A ", W, " falls back"),
        ("disabled ", W),
        (W,),
    ]
    assert [c.level for c in calls] == ["warning", "warning", "info", "warning"]
    assert [c.line for c in calls] == [2, 3, 4, 5]


def test_python_only_logging_receivers_count() -> None:
    src = """
        parser.warning("not a log: falls back")
        self.logger.warn("falls back")
        init_logger(__name__).debug("falls back")
        print("falls back")
    """
    assert [(c.level, c.line) for c in _py(src)] == [("warning", 3), ("debug", 4)]


# --------------------------------------------------------------------------- C, C++, CUDA


def test_c_printf_concatenated_literals_and_pri_macros() -> None:
    src = """
        // GGML_LOG_WARN("commented out, falling back\\n");
        #define GGML_LOG_WARN(...) ggml_log_internal(GGML_LOG_LEVEL_WARN, __VA_ARGS__)
        GGML_LOG_WARN("%s: tensor %" PRId64 " is not supported, "
                      "falling back to CPU (%.2f%%)\\n", __func__, n, pct);
    """
    call = _one(_c(src))
    assert call.level == "warning"
    assert call.line == 4
    assert call.parts == (W, ": tensor ", W, " is not supported, falling back to CPU (", W, "%)\n")


def test_c_fprintf_stderr_is_a_warning_only_when_it_says_so() -> None:
    src = """
        fprintf(stderr, "warning: %s falls back\\n", x);
        fprintf(stderr, "loading %s\\n", x);
        fprintf(stdout, "warning: not a log\\n");
    """
    assert [(c.level, c.parts) for c in _c(src)] == [
        ("warning", ("warning: ", W, " falls back\n")),
        ("stderr", ("loading ", W, "\n")),
    ]


def test_c_server_macro_takes_the_format_after_the_slot() -> None:
    call = _one(_c('SLT_WRN(slot, "n_ctx = %d, slow path%s\\n", n, s);'))
    assert call.parts == ("n_ctx = ", W, ", slow path", W, "\n")


def test_tllm_substitutes_only_with_arguments() -> None:
    src = """
        TLLM_LOG_WARNING("100% of %d unsupported, falling back", n);
        TLLM_LOG_WARNING("fixed 100%d text");
        TLLM_LOG_WARNING(msg);
    """
    assert [c.parts for c in _c(src)] == [
        ("100", W, "f ", W, " unsupported, falling back"),
        ("fixed 100%d text",),
        (W,),
    ]


def test_flashinfer_warn_streams_its_arguments_with_spaces() -> None:
    # exception.h: write_to_stream puts " " between arguments and formats nothing.
    call = _one(_c('FLASHINFER_WARN("Unsupported tile", m, "for SM%d", "falls back");'))
    assert call.parts == ("Unsupported tile ", W, " for SM%d falls back")


def test_spdlog_braces_and_raw_strings() -> None:
    src = 'FLASHINFER_LOG_WARN("{} not supported, {{x}}", a);\nLOG_WRN(R"(raw "q" %d)", 1);'
    assert [c.parts for c in _c(src)] == [(W, " not supported, {x}"), ('raw "q" ', W)]


# --------------------------------------------------------------------------- Rust


def test_rust_format_placeholders_fields_and_continuations() -> None:
    src = """
        tracing::warn!("Flash attention {e} not supported, using {:?} instead", x);
        warn!(target: "router", "Could not {{retrieve}} {0}, \\
               falling back", name);
        tracing::info!(model = %id, "Using default backend");
        warn!(msg);
    """
    calls = _rs(src)
    assert [c.parts for c in calls] == [
        ("Flash attention ", W, " not supported, using ", W, " instead"),
        ("Could not {retrieve} ", W, ", falling back"),
        ("Using default backend",),
        (W,),
    ]
    assert [c.level for c in calls] == ["warning", "warning", "info", "warning"]
    assert [c.line for c in calls] == [2, 3, 5, 6]


# --------------------------------------------------------------------------- the word rule


@pytest.mark.parametrize(
    "text",
    [
        "FA3 is not supported on Blackwell, falling back to FA2",
        "Layer 'x' is not supported by AutoAWQMarlin. Falling back to unoptimized AWQ kernels.",
        "Using the V1 model runner instead.",
        "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs.",
        "This may degrade performance for compute-heavy workloads.",
        "MSA-v1 Q8KV4 decode is unavailable; using the slower FP8 fallback.",
        "Unsupported dtypeElt",
    ],
)
def test_word_rule_says_it_falls_back(text: str) -> None:
    assert fb.says_it_falls_back(text)


@pytest.mark.parametrize(
    "text",
    [
        "Using FlashAttention-2 backend.",  # every healthy vLLM start prints this
        "Using FLASHINFER attention backend out of potential backends: ['FLASHINFER'].",
        "Using max model len 32768",
        "--quantization fp8 is deprecated for online quantization; use fp8_per_tensor instead.",
        "Using --url for metrics is deprecated. Please use --host instead.",
        "Falling asleep; fallbacks are listed below",  # no word 'fall back', no 'fallback' alone
        "FlashInfer TRTLLM MoE is enabled. --disable-shared-experts-fusion is automatically set.",
    ],
)
def test_word_rule_leaves_informational_and_advice_alone(text: str) -> None:
    assert not fb.says_it_falls_back(text)


# --------------------------------------------------------------------------- rule building


def test_one_line_literal_regex_and_inverse() -> None:
    parts = fb.one_line(
        ("  Kernel ", W, " not found.\nFalling back to the (slow) path [", W, "]\n")
    )
    assert parts == ("Falling back to the (slow) path [", W, "]")
    assert fb.literal_of(parts) == "Falling back to the (slow) path ["
    regex = fb.rule_regex(parts)
    assert regex == r"Falling back to the \(slow\) path \[.*?\]"
    assert fb.unregex(regex) == ["Falling back to the (slow) path [", W, "]"]
    assert fb.rule_regex((W, " falls back: ", W)) == "falls back:"
    assert fb.literal_of(("short", W, "tiny text")) is None
    # A literal of common words only would match other programs' lines too.
    assert not fb.distinctive("is disabled because")
    assert not fb.distinctive("-> falling back to")
    assert fb.distinctive("Unsupported dtypeElt")


def test_generate_on_a_small_tree(tmp_path: Path) -> None:
    """The whole generator on composed sources: one tree per language, counts in the header."""
    (tmp_path / "py" / "vllm").mkdir(parents=True)
    (tmp_path / "py" / "vllm" / "a.py").write_text(
        "logger.warning('Kernel %s is not supported here, falling back to Triton', k)\n"
        "logger.warning('Kernel %s is not supported here, falling back to Triton', j)\n"
        "logger.info('FlashInfer not found, falling back to the default sampler')\n"
        "logger.warning(f'{a} unsupported')\n"
        "logger.warning('Using FlashAttention-2 backend.')\n"
    )
    (tmp_path / "cc" / "src").mkdir(parents=True)
    (tmp_path / "cc" / "src" / "b.cpp").write_text(
        'LLAMA_LOG_WARN("%s: flash attention not supported by this device, disabling\\n", f);\n'
    )
    out = fb.generate(
        {"vllm": tmp_path / "py", "llamacpp": tmp_path / "cc"},
        data_dir("checks") / "log_signatures.toml",
    )
    doc = tomllib.loads(out)
    assert [s["regex"] for s in doc["signature"]] == [
        "Kernel .*? is not supported here, falling back to Triton",
        ": flash attention not supported by this device, disabling",
    ]
    assert doc["signature"][1]["source"] == (
        "https://github.com/ggml-org/llama.cpp/blob/0c1e57098/src/b.cpp#L1"
    )
    assert "#   vLLM: 4 / 3 / 1; info 1 / 1" in out
    assert "dropped 1: duplicate text" in out
    assert "dropped 1: no constant run of >= 12 characters" in out
    assert "#   llama.cpp: 1 / 1 / 1; info 0 / 0" in out
    catalogue = parse_catalogue(doc, name=FALLBACKS_FILE)
    assert [s.check for s in catalogue.signatures] == ["logs.moe_kernels", "logs.moe_kernels"]


# --------------------------------------------------------------------------- the shipped file


def test_shipped_file_is_generated_and_loaded_beside_the_curated_one() -> None:
    text = (data_dir("checks") / FALLBACKS_FILE).read_text("utf-8")
    assert "GENERATED by tools/logvocab/fallbacks.py: do not edit." in text
    raw = _raw()
    own = parse_catalogue(raw, name=FALLBACKS_FILE)  # every pattern compiled here
    assert len(own.signatures) >= 100
    assert not own.markers
    assert not own.inputs
    loaded = load_catalogue()
    assert {s.id for s in own.signatures} <= set(loaded.by_id)
    assert "moe.tma_ws_init_failed" in loaded.by_id
    for sig in own.signatures:
        runtime = sig.id.split(".")[1]
        assert runtime in fb.BY_KEY
        assert (sig.severity, sig.rule, sig.unless) == ("warn", None, None)
        # The runtime of the id first; a later one that prints the same text after it.
        urls = sig.source.split(" ; ")
        assert urls[0].startswith(f"https://github.com/{fb.BY_KEY[runtime].repo}/blob/")
        for url in urls:
            assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+/blob/[\w.]+/\S+#L\d+", url)
        assert len(sig.component.split(" ; ")) == len(urls)
        assert len(sig.literals) == 1
        assert len(sig.literals[0]) >= fb.MIN_LITERAL
        assert fb.distinctive(sig.literals[0])


def test_a_fallback_id_that_clashes_with_a_curated_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = read_shipped
    clash = dict(_raw()["signature"][0], id="moe.tma_ws_init_failed")

    def read(name: str) -> dict[str, Any]:
        return {"signature": [clash]} if name == FALLBACKS_FILE else real(name)

    monkeypatch.setattr("blackwell_doctor.ruledata.logs.read_shipped", read)
    # The build itself: load_catalogue may take a kept build of the shipped files' bytes
    # (an earlier in-process CLI run installs the cache).
    with pytest.raises(CatalogueError, match=r"log_fallbacks\.toml.*duplicate id"):
        logs._build()


def test_every_regex_is_re2_compatible() -> None:
    re2 = pytest.importorskip("re2")
    for sig in _raw()["signature"]:
        re2.compile(sig["regex"])
        assert not re.search(r"\(\?[=!<]|\\[1-9]", sig["regex"]), sig["id"]


def _rendered(sig: dict[str, Any]) -> str:
    """The line a rule's source message prints, each wildcard filled with a plausible value."""
    return fb.render(fb.unregex(sig["regex"]))


def test_every_literal_is_inside_what_its_regex_matches() -> None:
    for sig in _raw()["signature"]:
        line = _rendered(sig)
        assert sig["literals"][0] in line, sig["id"]
        assert re.search(sig["regex"], line), sig["id"]


def test_every_rule_finds_exactly_its_own_line_through_the_scanner(tmp_path: Path) -> None:
    """Composed: one line per rule, rendered from its own message under a vLLM-style record
    prefix; the real scanner and judge give each rule exactly once and nothing else."""
    sigs = _raw()["signature"]
    log = tmp_path / "rendered.log"
    log.write_text("".join(f"{PREFIX}{_rendered(s)}\n" for s in sigs), "utf-8")
    facts = scan_sources(
        paths=[str(log)], containers=[], journal=False, kernel_log=False, host_root=Path("/")
    )
    assert all(s.error is None for s in facts.sources), facts.sources
    got = {(f.signature, f.severity, f.count, f.line) for f in judge_findings(facts)}
    assert got == {(s["id"], "warn", 1, n) for n, s in enumerate(sigs, 1)}


def test_healthy_lines_give_no_finding(tmp_path: Path) -> None:
    # Composed from the shape of vLLM's and SGLang's healthy start-up records.
    log = tmp_path / "healthy.log"
    log.write_text(
        "INFO 11-28 07:00:00 [cuda.py:1] Using FlashAttention-2 backend.\n"
        "INFO 11-28 07:00:00 [cuda.py:1] Using FLASH_ATTN attention backend out of potential "
        "backends: ['FLASH_ATTN', 'FLASHINFER'].\n"
        "INFO 11-28 07:00:01 [core.py:1] Initializing a V1 LLM engine (v0.33.0) with config: "
        "model='Qwen/Qwen3-30B-A3B', dtype=torch.bfloat16, max_seq_len=32768, "
        "enforce_eager=False, kv_cache_dtype=auto, enable_prefix_caching=True, "
        "compilation_config={'level': 3, 'cudagraph_mode': 'FULL_AND_PIECEWISE'}\n"
        "INFO 11-28 07:00:02 [default_loader.py:1] Loading weights took 12.31 seconds\n"
        "INFO 11-28 07:00:03 [gpu_model_runner.py:1] Model loading took 56.9 GiB\n"
        "[2025-11-28 07:00:04] INFO server_args.py:1: attention_backend='flashinfer', "
        "moe_runner_backend='auto', disable_cuda_graph=False\n"
        "INFO:     Application startup complete.\n",
        "utf-8",
    )
    facts = scan_sources(
        paths=[str(log)], containers=[], journal=False, kernel_log=False, host_root=Path("/")
    )
    assert judge_findings(facts) == []


# --------------------------------------------------------------------------- TensorRT-LLM


# TensorRT-LLM v0.16.0 as its two loggers print a warning. C++: cpp/include/tensorrt_llm/
# common/logger.h Logger::log, getPrefix(level) "%s[%s] " with kPREFIX "[TensorRT-LLM]"
# ("[%s][%d] " with a rank). Python: tensorrt_llm/logger.py Logger.log, "[TRT-LLM] [W] " +
# msg, through a logging.Formatter('[%(asctime)s] %(message)s', '%m/%d/%Y-%H:%M:%S').
TRTLLM = "https://github.com/NVIDIA/TensorRT-LLM/blob/42a7b0922fc9e095f173eab9a7efa0bcdceadd0d/"


def _trtllm_python(message: str) -> str:
    record = logging.makeLogRecord({"msg": "[TRT-LLM] [W] " + message, "created": 1735034400})
    return logging.Formatter("[%(asctime)s] %(message)s", "%m/%d/%Y-%H:%M:%S").format(record)


# (the line as printed, the rule it is, its check, where its source cites TensorRT-LLM)
TRTLLM_WARNINGS = [
    (
        # Real: NVIDIA/TensorRT-LLM#3347 (comment of 2025-04-30, an L20 on v0.18): printed by
        # fmhaRunner.cpp's TLLM_LOG_WARNING("Fall back to unfused MHA for %s in sm_%d.", ...)
        "[TensorRT-LLM][WARNING] Fall back to unfused MHA for data_type = e4m3, head_size = 64, "
        "head_size_V = 0, attention_mask_type = causal, attention_input_layout = q_paged_kv, "
        "alibi = false, attn_logit_softcapping_scale = false in sm_89.",
        "fallback.trtllm.fall_back_to_unfused_mha_for_0767",
        "logs.moe_kernels",
        "cpp/tensorrt_llm/kernels/contextFusedMultiHeadAttention/fmhaRunner.cpp#L725",
    ),
    (
        "[TensorRT-LLM][WARNING][1] Since Peer to Peer not supported, fallback to "
        "AllReduceStrategy: NCCL",
        "fallback.trtllm.since_peer_to_peer_not_supported_fallback_94c3",
        "logs.p2p",
        "cpp/tensorrt_llm/thop/allreduceOp.cpp#L414",
    ),
    (
        _trtllm_python(
            "Logits dtype not supported by decoder. Falling back to float32. You may want to "
            "change the logits dtype to float16 in your model definition."
        ),
        "fallback.trtllm.logits_dtype_not_supported_by_decoder_falling_7200",
        "logs.moe_kernels",
        "tensorrt_llm/runtime/generation.py#L866",
    ),
    (
        _trtllm_python("Pre SM 80 GPUs do not support bfloat16, fallback to float16"),
        "fallback.trtllm.pre_sm_80_gpus_do_not_support_421c",
        "logs.moe_kernels",
        "tensorrt_llm/models/deepseek_v2/model.py#L271",
    ),
    (
        # FlashInfer vendors this kernel (csrc/nv_internal): one rule, both sources cited.
        "[TensorRT-LLM][WARNING] Requested split-k but workspace size insufficient. Falling "
        "back to non-split-k implementation.",
        "fallback.flashinfer.requested_split_k_but_workspace_size_insufficien_ff7a",
        "logs.moe_kernels",
        "cpp/tensorrt_llm/kernels/cutlass_kernels/fpA_intB_gemm/fpA_intB_gemm_template.h#L201",
    ),
]


def test_trtllm_record_prefixes_are_read_as_warnings() -> None:
    """records.py's tensorrt grammar agrees with what v0.16.0's loggers print: the level is
    the warning's, the message starts after the prefix."""
    for line, *_ in TRTLLM_WARNINGS:
        record = records.parse(line)
        assert record.grammar is not None, line
        assert record.grammar.name == "tensorrt", line
        assert record.level in ("WARNING", "W"), line
        assert records.classify(line) is None, line  # a warning, not an error
    assert re.fullmatch(
        r"\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] \[TRT-LLM\] \[W\] x", _trtllm_python("x")
    )
    line = _trtllm_python("Falls back")
    assert line[records.parse(line).message_at :] == "Falls back"


def test_trtllm_warnings_as_printed_are_found_with_their_source_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "trtllm.log"
    healthy = [  # v0.16.0 warnings and info of a healthy build and start (builder.py:217)
        "[TensorRT-LLM][INFO] Loaded engine size: 8424 MiB",
        _trtllm_python("Invalid timing cache, using freshly created one"),
    ]
    log.write_text("\n".join(healthy + [w[0] for w in TRTLLM_WARNINGS]) + "\n", "utf-8")
    code, out, _ = run(["scan-logs", "--format", "json", str(log)], capsys)
    assert code == 0  # warnings: below the default gate
    got = {
        (f["signature"], f["severity"], f["check"], f["line"]) for f in json.loads(out)["findings"]
    }
    want = {(sig, "warn", check, n) for n, (_, sig, check, _) in enumerate(TRTLLM_WARNINGS, 3)}
    assert got == want
    code, out, _ = run(["scan-logs", str(log)], capsys)
    # The text report: one block per signature, its rule's source URLs under "Source:".
    blocks = {b.split(" ", 1)[0]: b for b in out.split("\n\n") if b.startswith("fallback.")}
    assert set(blocks) == {sig for _, sig, _, _ in TRTLLM_WARNINGS}
    for _, sig, _, where in TRTLLM_WARNINGS:
        assert TRTLLM + where in blocks[sig].split("  Source:\n", 1)[1], sig
