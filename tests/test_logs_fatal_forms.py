"""Fatal forms, grammars and the Xid cause rule added for the fatal misses of the fresh sets
(issue 33, tests/fixtures/logs-fresh-a and -b).

Every line below is COMPOSED here from the format string or message its source prints
(cited beside it, as in src/blackwell_doctor/ruledata/records.py), not copied from either
fresh set: device names, ranks, ports, paths and numbers are made up.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from blackwell_doctor.collect.logs.matcher import clean_line
from blackwell_doctor.collect.logs.scan import scan_sources
from blackwell_doctor.ruledata import records
from blackwell_doctor.rules.logs import JudgedFinding, judge_findings
from tests.test_logs_grammars import ERROR, FATAL, _scan_lines

FATAL_LINES = [
    # torch ProcessGroupNCCL.cpp watchdog, c10 MessageLogger "[E<m><dd> hh:mm:ss.n file:line] "
    # under torch's "[rankN]:" (and a launcher's "[pid] " before it)
    "[rank3]:[E1128 09:14:02.118273645 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught"
    " collective operation timeout: WorkNCCL(SeqNum=42, OpType=BROADCAST, NumelIn=8,"
    " NumelOut=8, Timeout(ms)=1800000) ran for 1800093 milliseconds before timing out.",
    "[4711] [rank1]:[E1128 09:14:02.118273645 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog"
    " caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLGATHER, NumelIn=2,"
    " NumelOut=16, Timeout(ms)=600000) ran for 600412 milliseconds before timing out.",
    # torch c10d socket.cpp, raised as DistNetworkError, under torchelastic's "[default0]:"
    "[default0]:torch.distributed.DistNetworkError: The client socket has timed out after 900s"
    " while trying to connect to (head-node, 29400).",
    "[default0]:[E socket.cpp:641] [c10d] The client socket has timed out after 900s while"
    " trying to connect to (head-node, 29400).",
    # stable-diffusion.cpp util.cpp log_printf "[%s] %s:%-4d - " with ggml_cuda_error's text
    "[ERROR] ggml_extend.hpp:75   - CUDA error: out of memory",
    # ggml.c ggml_abort "%s:%d: " + GGML_ABORT("CUDA error") from ggml_cuda_error
    "/src/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu:96: CUDA error",
    "ggml/src/ggml.c:3120: GGML_ASSERT(ctx->mem_buffer != NULL) failed",
    # libnvidia-container src/cli warnx("<stage> error: %s") then exit
    "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown",
    "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please update"
    " your driver to a newer version, or use an earlier cuda container: unknown",
    # docker CLI "Error response from daemon: " before containerd's / runc's failure
    "docker: Error response from daemon: failed to create task for container: failed to create"
    " shim task: OCI runtime create failed: runc create failed: unable to start container"
    ' process: exec: "serve": executable file not found in $PATH: unknown.',
    "Error response from daemon: failed to create shim task: OCI runtime create failed: runc"
    " create failed: unable to start container process: error during container init: unknown",
    # LocalAI pkg/model/initializers.go "[%s] Fails: %s" at INF (zerolog console writer)
    # with loader.go's "could not load model: %w"; go-llama.cpp "failed loading model"
    "9:25PM INF [llama-cpp] Fails: could not load model: rpc error: code = Canceled desc = ",
    "9:25PM INF [llama-ggml] Fails: could not load model: rpc error: code = Unknown desc ="
    " failed loading model",
    '2:02AM ERR Server error error="could not load model - all backends returned error: ..."',
    # Triton src/main.cc FAIL_IF_ERR "error: creating server: <code> - <msg>"
    "error: creating server: Internal - failed to load all models",
    # Triton core's model status table, a model that failed to load
    "| llama_trt    | 1       | UNAVAILABLE: Internal: unable to create TensorRT engine |",
    "| resnet50_onnx | 3       | UNAVAILABLE: Invalid argument: model input has no dims |",
    # ray/scripts/scripts.py `ray start --block`
    "Some Ray subprocesses exited unexpectedly:",
    "Some Ray subprcesses exited unexpectedly:",  # spelt so in older Ray
    "Remaining processes will be killed.",
    # Bumblebee optirun.c bb_log(LOG_ERR, ...) "[%5d.%06d] [%s]%s"
    "[ 5012.004411] [ERROR]Aborting because fallback start is disabled.",
    # gpu-burn gpu_burn-drv.cpp "Couldn't init a GPU test: %s"
    "Couldn't init a GPU test: Error: CUDA_ERROR_NO_DEVICE",
    # an exception line a logger wrapped under its level column (rich, loguru in compose)
    "api  |                        RuntimeError: cudaHostRegister(0x7f0000000000, 4096)",
    "            torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    # ONNX Runtime ostream_sink.cc, a fatal record
    "2024-05-02 10:11:12.123456789 [F:onnxruntime:, cuda_call.cc:123 CudaCall] CUDA failure"
    " 700: an illegal memory access was encountered",
]

ERROR_LINES = [
    # c10 MessageLogger before torch 2.2: "[E file:line] "
    "[E socket.cpp:610] [c10d] The client socket has failed to connect to any network address"
    " of (head-node, 29400).",
    "[1]:[E socket.cpp:610] [c10d] The client socket has failed to connect to any network"
    " address of (head-node, 29400).",
    # ONNX Runtime ostream_sink.cc: "<ts> [E:onnxruntime:<logid>, <file>:<line> <func>] "
    "2024-05-02 10:11:12.123456789 [E:onnxruntime:, inference_session.cc:1983 operator()]"
    " Exception during initialization: cannot allocate the arena",
    # ONNX Runtime's TensorRT EP logger: TensorRT's own "  ERROR"/"    BUG" under ORT's W
    "2024-05-02 10:11:12.123456789 [W:onnxruntime:Default, tensorrt_execution_provider.h:83"
    " log] [2024-05-02 10:11:12   ERROR] 1: [myelinBuilderUtils.cpp::operator()::371] Error"
    " Code 1: Myelin (no results)",
    "2024-05-02 10:11:12.123456789 [W:onnxruntime:Default, tensorrt_execution_provider.h:83"
    " log] [2024-05-02 10:11:12     BUG] 2: [builder.cpp::buildSerializedNetwork::417] Error"
    " Code 2: Internal Error (assertion failed)",
]

HEALTHY_LINES = [
    # Triton's table: a model that is ready, one unloaded on purpose
    "| llama_trt    | 1       | READY                                        |",
    "| llama_trt    | 1       | UNAVAILABLE: unloaded                        |",
    # c10 W and I records with scary words
    "[W socket.cpp:558] [c10d] The client socket has failed to connect to [localhost]:29400"
    " (errno: 99 - Cannot assign requested address).",
    "[rank0]:[I1128 09:14:02.118273645 ProcessGroupNCCL.cpp:921] [PG 0 Rank 0]"
    " ProcessGroupNCCL initialization options: TORCH_NCCL_ASYNC_ERROR_HANDLING: 3, TIMEOUT(ms):"
    " 600000, Watchdog timeout checks enabled",
    "[default0]:[W1128 09:14:02.118273645 ProcessGroupNCCL.cpp:4200] Warning: an error in one"
    " rank will not be caught until the watchdog times out",
    # ONNX Runtime W and I records, and the TRT EP's WARNING under W
    "2024-05-02 10:11:12.123456789 [W:onnxruntime:, session_state.cc:1168"
    " VerifyEachNodeIsAssignedToAnEp] Rerunning with verbose output on a non-minimal build will"
    " show node assignments.",
    "2024-05-02 10:11:12.123456789 [W:onnxruntime:Default, tensorrt_execution_provider.h:83"
    " log] [2024-05-02 10:11:12 WARNING] onnx2trt_utils.cpp:374: Your ONNX model has been"
    " generated with INT64 weights, while TensorRT does not natively support INT64.",
    "2024-05-02 10:11:12.123456789 [I:onnxruntime:, inference_session.cc:1 Init] error"
    " handling: strict",
    # stable-diffusion.cpp INFO / WARN records
    "[INFO ] stable-diffusion.cpp:201  - CUDA error checking enabled",
    "[WARN ] model.cpp:1100 - unknown tensor 'cond_stage_model.error_proj' in model file",
    # a daemon's verbose signal line (its Shutdown line is judged below, with its context)
    "May 31 05:33:41 host nvidia-persistenced[4321]: Received signal 15",
    # Ray and docker in health
    "Ray runtime started.",
    "Running subprocesses are monitored and a message will be printed if any of them terminate"
    " unexpectedly.",
    "nvidia-container-cli: ldcache: /etc/ld.so.cache",
    # a progress line and a torchx replica line with nothing wrong
    "trainer/0 [0]:epoch 3/10 loss 0.12 errors 0",
]


@pytest.mark.parametrize("line", FATAL_LINES)
def test_a_fatal_form_from_the_sources_is_fatal(line: str) -> None:
    assert records.classify(clean_line(line.encode())) == "fatal", line


@pytest.mark.parametrize("line", ERROR_LINES)
def test_an_error_record_of_the_new_grammars_is_an_error(line: str) -> None:
    assert records.classify(clean_line(line.encode())) == "error", line


@pytest.mark.parametrize("line", HEALTHY_LINES)
def test_healthy_lines_with_the_same_words_are_no_error(line: str) -> None:
    assert records.classify(clean_line(line.encode())) is None, line


@pytest.mark.parametrize("line", FATAL_LINES)
def test_the_scanner_finds_each_fatal_form_by_its_literals(line: str) -> None:
    assert FATAL in _scan_lines([line, "INFO 06-01 21:52:30 [x.py:1] later"]), line


@pytest.mark.parametrize("line", ERROR_LINES)
def test_the_scanner_finds_each_error_record_by_its_literals(line: str) -> None:
    assert ERROR in _scan_lines([line, "INFO 06-01 21:52:30 [x.py:1] later"]), line


@pytest.mark.parametrize("line", HEALTHY_LINES)
def test_the_scanner_finds_nothing_in_the_healthy_lines(line: str) -> None:
    assert _scan_lines([line]) == set(), line


def _scan(tmp_path: Path, text: str) -> list[JudgedFinding]:
    log = tmp_path / "kern.log"
    log.write_text(text, encoding="utf-8")
    facts = scan_sources(
        paths=[str(log)], containers=[], journal=False, kernel_log=False, host_root=Path("/")
    )
    return judge_findings(facts)


# NVRM's Xid line (open-gpu-kernel-modules nvrm "NVRM: Xid (PCI:%04x:%02x:%02x): %d, ...");
# Xid 45's text names the error it cleans up after.
XID45 = (
    "Nov 28 09:00:01 host kernel: NVRM: Xid (PCI:0000:3b:00): 45, pid=2211, name=python3,"
    " Ch 00000004 caused by previous Xid {}\n"
)


def test_xid_45_caused_by_a_fatal_xid_takes_its_verdict(tmp_path: Path) -> None:
    got = _scan(tmp_path, XID45.format(48))  # 48: DBE, fatal in the table
    assert [(j.signature, j.severity) for j in got] == [("kernel.xid_fatal", "fail")]
    assert "caused by Xid 48 (" in got[0].excerpt


def test_xid_45_caused_by_a_non_fatal_xid_stays_a_warning(tmp_path: Path) -> None:
    got = _scan(tmp_path, XID45.format(43))  # 43: not fatal in the table
    assert [(j.signature, j.severity) for j in got] == [("kernel.xid", "warn")]


# nvidia-persistenced (nvidia-persistenced.c): "Started (%d)", "Shutdown (%d)" at LOG_NOTICE;
# systemd's stop job for its unit (job.c "Stopping %s..." / "Stopped %s.").
_PD = "May 31 05:33:{:02d} host nvidia-persistenced[4321]: {}\n"
_SYSTEMD = "May 31 05:33:{:02d} host systemd[1]: {}\n"


def _daemon(got: list[JudgedFinding]) -> list[tuple[str, str]]:
    return [(j.signature, j.severity) for j in got if j.signature.startswith("host.")]


def test_the_persistence_daemon_down_at_the_end_with_no_stop_job_fails(tmp_path: Path) -> None:
    text = _PD.format(1, "Started (4321)") + _PD.format(2, "Received signal 15")
    text += _PD.format(2, "Shutdown (4321)")
    got = _daemon(_scan(tmp_path, text))
    assert got == [("host.persistence_daemon_stopped", "fail")]


@pytest.mark.parametrize(
    "job",
    [
        "Stopping NVIDIA Persistence Daemon...",  # systemd before 250 (the Description)
        "Stopping nvidia-persistenced.service - NVIDIA Persistence Daemon...",  # 250+
        "Stopped NVIDIA Persistence Daemon.",
    ],
)
def test_a_stop_systemd_ordered_is_info(tmp_path: Path, job: str) -> None:
    text = _PD.format(1, "Started (4321)") + _SYSTEMD.format(2, job)
    text += _PD.format(2, "Shutdown (4321)")
    got = _daemon(_scan(tmp_path, text))
    assert got == [("host.persistence_daemon_stopped", "info")]


def test_a_stop_the_daemon_came_back_from_is_info(tmp_path: Path) -> None:
    text = _PD.format(1, "Shutdown (4321)") + _PD.format(3, "Started (4400)")
    assert _daemon(_scan(tmp_path, text)) == [("host.persistence_daemon_stopped", "info")]
    # ... and a start before the stop is no come-back
    text = _PD.format(1, "Started (4400)") + _PD.format(3, "Shutdown (4400)")
    assert _daemon(_scan(tmp_path, text)) == [("host.persistence_daemon_stopped", "fail")]


def test_a_start_job_is_no_stop_job(tmp_path: Path) -> None:
    text = _SYSTEMD.format(0, "Starting NVIDIA Persistence Daemon...")
    text += _PD.format(1, "Started (4321)") + _PD.format(2, "Shutdown (4321)")
    assert _daemon(_scan(tmp_path, text)) == [("host.persistence_daemon_stopped", "fail")]


_LOCALAI = (
    "9:25PM INF [llama-cpp] Attempting to load\n"
    "9:25PM INF [llama-cpp] Fails: could not load model: rpc error: code = Canceled desc = \n"
    "9:25PM INF [llama-ggml] Attempting to load\n"
)


def test_localai_backends_that_all_fail_are_a_fatal_error(tmp_path: Path) -> None:
    got = [(j.signature, j.severity) for j in _scan(tmp_path, _LOCALAI)]
    assert got == [("runtime.unrecognised_fatal_error", "fail")]


def test_localai_a_backend_that_loads_after_a_failure_is_survived(tmp_path: Path) -> None:
    got = _scan(tmp_path, _LOCALAI + "9:25PM INF [llama-ggml] Loads OK\n")
    survived = [("runtime.unrecognised_fatal_error", "info")]
    assert [(j.signature, j.severity) for j in got] == survived
