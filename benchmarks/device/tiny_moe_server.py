"""A minimal OpenAI-compatible streaming server of a tiny random MoE, for measuring
``bench`` on a real GPU where vLLM is not installed (issue 21, "once on a real GPU").

    python benchmarks/device/tiny_moe_server.py --model-dir DIR [--device cuda] [--port 0]

``--model-dir`` is written by ci/make_tiny_moe.py (a random Qwen3-MoE, 8 experts top-2, with
a locally trained tokenizer: no hub, no network) when it holds no model yet. The server binds
127.0.0.1 only and prints ``READY <port>`` once it listens (port 0: a free one).

Endpoints, in vLLM's shapes (vllm/entrypoints/openai/*, v0.32.0):

- ``GET /v1/models``: the model card (id, root, max_model_len).
- ``GET /version``: ``{"version": ...}`` (this server's, with torch's and transformers').
- ``GET /metrics``: Prometheus text with one info gauge of the configuration and this
  server's counters (generation and prompt tokens); no vLLM names are claimed.
- ``POST /tokenize``: ``{"count": n}`` of a chat (template applied) or a prompt.
- ``POST /v1/completions`` and ``/v1/chat/completions``: streamed as SSE, a chunk per token
  (chat: a first chunk with the role), the finish reason on the last token's chunk, then,
  with ``stream_options.include_usage``, a chunk with no choices and the usage and
  ``system_fingerprint``, then ``data: [DONE]``; or one JSON answer without ``stream``.

Generation is a manual greedy or sampled decode loop with the KV cache (no batching): one
request at a time in one worker thread, the others queue. It is a tiny server for measuring
the measuring tool, not an inference engine.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib
import json
import queue
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SERVER_VERSION = "0.1.0"
MAX_MODEL_LEN = 2048


@dataclass
class Job:
    ids: list[int]
    max_tokens: int
    temperature: float
    ignore_eos: bool
    seed: int | None
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue[tuple[str, Any]]
    cancelled: threading.Event = field(default_factory=threading.Event)


class Engine:
    """The model on its device, and the one worker thread that runs jobs in turn."""

    def __init__(self, model_dir: Path, device: str) -> None:
        # Imported by name: the project's type checker runs where torch is not installed.
        torch: Any = importlib.import_module("torch")
        transformers: Any = importlib.import_module("transformers")
        AutoModelForCausalLM, AutoTokenizer = (
            transformers.AutoModelForCausalLM,
            transformers.AutoTokenizer,
        )

        self.torch = torch
        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        try:  # transformers >= 4.56 names it dtype; older ones torch_dtype
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
        except TypeError:
            model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype)
        self.model = model.to(device)
        self.model.eval()
        self.dtype = str(dtype).removeprefix("torch.")
        self.eos = self.tokenizer.eos_token_id
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.generation_tokens = 0
        self.prompt_tokens = 0
        self.requests = 0
        self.running = 0
        config = json.dumps(self.model.config.to_dict(), sort_keys=True, default=str)
        self.config_hash = hashlib.sha256(f"{config}|{self.dtype}|{device}".encode()).hexdigest()[
            :8
        ]
        self.fingerprint = f"tiny-moe-server-{SERVER_VERSION}-{self.config_hash}"
        self.gpu = torch.cuda.get_device_name(0) if device == "cuda" else "none"
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.thread.start()

    def chat_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        if isinstance(ids, dict):  # transformers versions differ in what they return
            ids = ids["input_ids"]
        return list(ids)

    def prompt_ids(self, prompt: str, *, special: bool = True) -> list[int]:
        return list(self.tokenizer(prompt, add_special_tokens=special)["input_ids"])

    def _work(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            self.running = 1
            try:
                self._generate(job)
            except Exception as exc:  # the request fails, the server goes on
                job.loop.call_soon_threadsafe(job.out.put_nowait, ("error", repr(exc)))
            finally:
                self.running = 0

    def _generate(self, job: Job) -> None:
        torch = self.torch
        put = job.loop.call_soon_threadsafe
        ids = job.ids[-(MAX_MODEL_LEN - 1) :]
        room = max(1, min(job.max_tokens, MAX_MODEL_LEN - len(ids)))
        generator = None
        if job.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(job.seed)
        self.prompt_tokens += len(ids)
        with torch.inference_mode():
            x = torch.tensor([ids], device=self.device)
            past = None
            reason = "length"
            for step in range(room):
                if job.cancelled.is_set():
                    reason = "abort"
                    break
                out = self.model(input_ids=x, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1].float()
                if job.temperature <= 0.0:
                    token = int(torch.argmax(logits))
                else:
                    probs = torch.softmax(logits / job.temperature, dim=-1)
                    token = int(torch.multinomial(probs, 1, generator=generator))
                self.generation_tokens += 1
                # As vLLM streams: a chunk per token (the end-of-sequence one too, with no
                # text), the finish reason on the last one.
                stop = token == self.eos and not job.ignore_eos
                last = stop or step == room - 1
                if stop:
                    reason = "stop"
                put(job.out.put_nowait, ("token", (token, reason if last else None)))
                if stop:
                    break
                x = torch.tensor([[token]], device=self.device)
        put(job.out.put_nowait, ("done", reason))


def _now() -> int:
    return int(time.time())


def build_app(engine: Engine, served: str, model_dir: Path) -> Any:
    from aiohttp import web

    async def models(_: web.Request) -> web.Response:
        card = {
            "id": served,
            "object": "model",
            "created": _now(),
            "owned_by": "blackwell-doctor",
            "root": str(model_dir),
            "parent": None,
            "max_model_len": MAX_MODEL_LEN,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def version(_: web.Request) -> web.Response:
        torch: Any = importlib.import_module("torch")
        transformers: Any = importlib.import_module("transformers")
        return web.json_response(
            {
                "version": f"tiny-moe-server {SERVER_VERSION} (torch {torch.__version__}, "
                f"transformers {transformers.__version__})"
            }
        )

    async def metrics(_: web.Request) -> web.Response:
        labels = {
            "device": engine.device,
            "dtype": engine.dtype,
            "gpu": engine.gpu,
            "max_model_len": str(MAX_MODEL_LEN),
            "batching": "none",
        }
        shown = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        text = (
            "# HELP tiny_moe_server_config_info The server's configuration.\n"
            "# TYPE tiny_moe_server_config_info gauge\n"
            f"tiny_moe_server_config_info{{{shown}}} 1.0\n"
            "# HELP tiny_moe_server_generation_tokens Generated tokens.\n"
            "# TYPE tiny_moe_server_generation_tokens counter\n"
            f"tiny_moe_server_generation_tokens_total {engine.generation_tokens}.0\n"
            "# HELP tiny_moe_server_num_requests_running Requests generating.\n"
            "# TYPE tiny_moe_server_num_requests_running gauge\n"
            f"tiny_moe_server_num_requests_running {engine.running}.0\n"
        )
        return web.Response(text=text, content_type="text/plain")

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        if isinstance(body.get("messages"), list):
            ids = engine.chat_ids(body["messages"])
        else:
            ids = engine.prompt_ids(
                str(body.get("prompt", "")), special=body.get("add_special_tokens", True)
            )
        return web.json_response({"count": len(ids), "max_model_len": MAX_MODEL_LEN, "tokens": ids})

    def _error(status: int, message: str) -> web.Response:
        return web.json_response(
            {"error": {"message": message, "type": "BadRequestError", "code": status}},
            status=status,
        )

    async def complete(request: web.Request, *, chat: bool) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return _error(400, "not JSON")
        if body.get("model") not in (served, None):
            return _error(404, f"The model `{body.get('model')}` does not exist.")
        if chat:
            if not isinstance(body.get("messages"), list):
                return _error(400, "messages: a list is required")
            ids = engine.chat_ids(body["messages"])
        else:
            ids = engine.prompt_ids(str(body.get("prompt", "")))
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        temperature = float(body.get("temperature", 1.0))
        job = Job(
            ids=ids,
            max_tokens=max(1, max_tokens),
            temperature=temperature,
            ignore_eos=bool(body.get("ignore_eos", False)),
            seed=body.get("seed") if isinstance(body.get("seed"), int) else None,
            loop=asyncio.get_running_loop(),
            out=asyncio.Queue(),
        )
        engine.requests += 1
        engine.jobs.put(job)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:16]
        kind = "chat.completion" if chat else "text_completion"
        stream = bool(body.get("stream", False))
        usage_asked = bool((body.get("stream_options") or {}).get("include_usage", False))
        created = _now()
        generated: list[int] = []
        shown = ""

        def delta_text(final: bool) -> str:
            nonlocal shown
            text = str(engine.tokenizer.decode(generated, skip_special_tokens=True))
            if not final and text.endswith("\ufffd"):  # half of a multi-byte character
                return ""
            new, shown = text[len(shown) :], text
            return new

        def chunk(text: str | None, finish: str | None, *, role: bool = False) -> bytes:
            if chat:
                delta: dict[str, Any] = {"role": "assistant"} if role else {}
                if text is not None:
                    delta["content"] = text
                choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text or "", "finish_reason": finish}
            event = {"id": rid, "object": f"{kind}.chunk", "created": created, "model": served}
            event["choices"] = [choice]
            return f"data: {json.dumps(event)}\n\n".encode()

        if not stream:
            reason = "length"
            while True:
                what, value = await job.out.get()
                if what == "error":
                    return _error(500, str(value))
                if what == "done":
                    reason = value
                    break
                generated.append(value[0])
            text = delta_text(True)
            choice = (
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": reason,
                }
                if chat
                else {"index": 0, "text": text, "finish_reason": reason}
            )
            return web.json_response(
                {
                    "id": rid,
                    "object": kind,
                    "created": created,
                    "model": served,
                    "choices": [choice],
                    "usage": _usage(len(ids), len(generated)),
                    "system_fingerprint": engine.fingerprint,
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            first = True
            while True:
                what, value = await job.out.get()
                if what == "error":
                    error = {
                        "error": {"message": str(value), "type": "InternalServerError", "code": 500}
                    }
                    await response.write(f"data: {json.dumps(error)}\n\n".encode())
                    break
                if what == "token":
                    token, finish = value
                    generated.append(token)
                    await response.write(chunk(delta_text(finish is not None), finish, role=first))
                    first = False
                    continue
                if what == "done":
                    if usage_asked:
                        final = {
                            "id": rid,
                            "object": f"{kind}.chunk",
                            "created": created,
                            "model": served,
                            "choices": [],
                            "usage": _usage(len(ids), len(generated)),
                            "system_fingerprint": engine.fingerprint,
                        }
                        await response.write(f"data: {json.dumps(final)}\n\n".encode())
                    break
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            job.cancelled.set()
            raise
        return response

    async def chat(request: web.Request) -> web.StreamResponse:
        return await complete(request, chat=True)

    async def completions(request: web.Request) -> web.StreamResponse:
        return await complete(request, chat=False)

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="")

    app = web.Application(client_max_size=64 << 20)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    return app


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--served-model-name", default="tiny-moe")
    args = parser.parse_args()
    if not (args.model_dir / "config.json").exists():
        maker = Path(__file__).resolve().parents[2] / "ci" / "make_tiny_moe.py"
        subprocess.run([sys.executable, str(maker), str(args.model_dir)], check=True, timeout=300)
    # The decode loop holds the GIL between kernels: let the event loop in often, so each
    # token's chunk goes out as it is made, not in bursts (which would distort ITL).
    sys.setswitchinterval(0.0005)
    engine = Engine(args.model_dir, args.device)
    from aiohttp import web

    async def serve() -> None:
        runner = web.AppRunner(build_app(engine, args.served_model_name, args.model_dir))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port)
        await site.start()
        port = runner.addresses[0][1]
        print(f"READY {port}", flush=True)
        await asyncio.Event().wait()  # until killed

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    finally:
        engine.jobs.put(None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
