"""`bench` against hostile servers and hostile --url values (issue 19): redirects, bad
URLs, endless streams and bodies, impossible usage counts, echoed credentials, secrets in
the URL. Every server is a real aiohttp server on 127.0.0.1 (tests/hostile_http.py),
started in-process before the test goes on; nothing here sleeps."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.cli import main
from blackwell_doctor.facts.redact import redact_url_host as facts_redact_url
from blackwell_doctor.report.bench_facts import read_bench
from tests.conftest import FIXTURES as ALL_FIXTURES
from tests.conftest import skip_without

try:
    import aiohttp
    import yarl
    from aiohttp import web
    from hypothesis import example, given, settings
    from hypothesis import strategies as st

    from blackwell_doctor.app import bench as runner
    from blackwell_doctor.collect.bench import client
    from tests import hostile_http as h
except ModuleNotFoundError as exc:
    skip_without(exc)

FIXTURES = ALL_FIXTURES / "bench"

MB = 1 << 20
# The error kinds (a contract: bench/client.py, the JSON, the README).
HTTP_3XX = "http_3xx"
MALFORMED_SSE = "malformed_sse"
MALFORMED_USAGE = "malformed_usage"


@pytest.fixture
def shapes(tmp_path: Path) -> Path:
    path = tmp_path / "s.toml"
    path.write_text("[shape.one]\ninput_tokens = 8\noutput_tokens = 7\nrequests = 1\n")
    return path


def bench(
    capsys: pytest.CaptureFixture[str], shapes: Path, url: str, *extra: str
) -> tuple[int, dict[str, Any], str]:
    """Run ``bench --url url`` (one shape, one request, JSON on stdout): (exit, doc, all
    the text it printed)."""
    code = main(
        [
            "bench",
            "--url",
            url,
            "--shapes",
            str(shapes),
            "--shape",
            "one",
            "--no-equivalence",
            "-f",
            "json",
            "--request-timeout",
            "20",
            *extra,
        ]
    )
    captured = capsys.readouterr()
    doc = json.loads(captured.out) if captured.out.strip() else {}
    return code, doc, captured.out + captured.err


def errors_of(doc: dict[str, Any]) -> dict[str, int]:
    return dict(doc["shapes"][0]["errors"]) if doc.get("shapes") else {}


def fetch(url: str, *, deadline: float = 20.0, **bounds: int) -> client.Outcome:
    async def go() -> client.Outcome:
        async with aiohttp.ClientSession() as session:
            body = client.request_body(model="fake", prompt="hi", max_tokens=7, ignore_eos=True)
            return await client.stream_chat(
                session, url + "/v1/chat/completions", body, {}, deadline_s=deadline, **bounds
            )

    return asyncio.run(go())


# --- 1. redirects are never followed ------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "location"),
    [(302, "file:///etc/passwd"), (307, "/elsewhere"), (301, "ftp://127.0.0.1/x")],
)
def test_a_redirect_of_the_chat_request_is_a_named_failure(
    capsys: pytest.CaptureFixture[str], shapes: Path, status: int, location: str
) -> None:
    routes = {("POST", "/v1/chat/completions"): h.redirect_to(location, status)}
    with h.serving(routes) as url:
        code, doc, _ = bench(capsys, shapes, url)
    assert code == 1
    assert errors_of(doc) == {HTTP_3XX: 1}
    detail = doc["shapes"][0]["samples"][0]["detail"]
    assert detail.startswith(f"HTTP {status} redirect")


def test_a_redirect_to_another_server_is_not_followed(
    capsys: pytest.CaptureFixture[str], shapes: Path
) -> None:
    seen: list[str] = []

    async def other(request: web.Request) -> web.StreamResponse:
        seen.append(request.method)
        return await h.good_stream()(request)

    elsewhere = {("GET", "/v1/chat/completions"): other, ("POST", "/v1/chat/completions"): other}
    with h.serving(elsewhere) as other_url:
        routes = {
            ("POST", "/v1/chat/completions"): h.redirect_to(other_url + "/v1/chat/completions")
        }
        with h.serving(routes) as url:
            code, doc, _ = bench(capsys, shapes, url)
    assert seen == []
    assert code == 1
    assert errors_of(doc) == {HTTP_3XX: 1}


@pytest.mark.parametrize("path", ["/v1/models", "/metrics", "/tokenize"])
def test_a_redirect_of_a_probe_is_not_followed(
    capsys: pytest.CaptureFixture[str], shapes: Path, path: str
) -> None:
    method = "POST" if path == "/tokenize" else "GET"
    routes = {
        (method, path): h.redirect_to("file:///etc/passwd"),
        ("POST", "/v1/chat/completions"): h.good_stream(),
    }
    with h.serving(routes) as url:
        code, doc, _ = bench(capsys, shapes, url)
    if path == "/v1/models":
        assert code == 1
        assert doc["server"]["error"].startswith(f"{HTTP_3XX}: /v1/models answered HTTP 302")
    else:
        assert code == 0
        assert any(path in f and "HTTP 302" in f for f in doc["findings"]), doc["findings"]


# --- 2. --url: one line, exit 2 -----------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://[::1", "not a valid URL"),
        ("http://[zz::1]:80", "not a valid URL"),
        ("http://127.0.0.1\x00:80", "control character"),
        ("http://127.0.0.1:80/\x1b]0;title\x07", "control character"),
        ("http://127.0.0.1:80/a\nb", "control character"),
        ("http://127.0.0.1:80/a b", "control character"),
        ("http://h\u202e:80", "control character"),
        ("http://127.0.0.1:0", "port 0"),
        ("http://a..b:80", "invalid host"),
        ("http://" + "a" * 64 + ".com", "invalid host"),
        ("http://999.1.1.1", "invalid host"),
        ("http://[v1.x]", "not a valid URL"),
        ("http://127.0.0.1:65536", "invalid port"),
        ("http://127.0.0.1:99999", "invalid port"),
        ("http://127.0.0.1:-1", "invalid port"),
        ("file:///etc/passwd", "must be an http:// or https:// URL"),
        ("ftp://u:SECRETPW@h", "must be an http:// or https:// URL"),
        ("http://u:SECRETPW@h:99999", "invalid port"),
        ("http://u:SECRETPW@[::1", "not a valid URL"),
        ("http://u:SECRETPW@h:0", "port 0"),
        ("http://h:80/?key=SECRETPW", "query"),
        ("http://h:80/#SECRETPW", "fragment"),
        ("http://u:SECRETPW@", "must be an http:// or https:// URL"),
        ("http://h:80/" + "a" * 10_000, "longer than"),
        ("http://u:" + "p" * 190 + "SECRETPW@h:0", "port 0"),
    ],
)
def test_a_bad_url_is_one_line_exit_2_and_never_shows_a_password(
    capsys: pytest.CaptureFixture[str], url: str, message: str
) -> None:
    assert main(["bench", "--url", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("blackwell-doctor: error: ")
    assert message in err
    assert err.count("\n") == 1
    assert "SECRETPW" not in err
    for raw in ("\x1b", "\x00", "\u202e"):
        assert raw not in err


@settings(max_examples=300, deadline=None)
@example("http://xn--a.example")
@example("http://bücher.example:8000/v1")
@example("http://[fe80::1%25eth0]:8000")
@example("http://[::ffff:1.2.3.4]")
@example("http://\u0661")
@example("HTTP://\\")
@example("http://a..b")
@example("http://" + "a" * 64 + ".com")
@example("http://" + "a" * 300)
@example("http://999.1.1.1:1")
@example("http://1.2.3.4.5")
@example("http://[v1.x]")
@given(
    st.one_of(
        st.text(max_size=60),
        st.builds(
            "{}://{}{}{}".format,
            st.sampled_from(["http", "https", "HTTP", "ftp", ""]),
            st.text(alphabet="u:pw@[]%25fzZ01.-", max_size=14),
            st.sampled_from(["", ":", ":0", ":80", ":65535", ":65536", ":-1", ":8a", ": 1"]),
            st.text(alphabet="/v1?#=%.&\\", max_size=8),
        ),
    )
)
def test_any_url_is_an_endpoint_or_a_url_error(url: str) -> None:
    """Whatever the text, parse_url gives an endpoint aiohttp accepts, or a UrlError."""
    try:
        endpoint = runner.parse_url(url)
    except runner.UrlError as exc:
        error = str(exc)
    else:
        error = ""
    if error:
        assert "\n" not in error
        return
    parsed = yarl.URL(endpoint.url("/v1/models"))
    assert parsed.scheme in ("http", "https")
    assert parsed.host
    assert parsed.raw_host
    if not parsed.raw_host.replace(".", "").isdigit() and ":" not in parsed.raw_host:
        parsed.raw_host.encode("idna")  # what the resolver does with it
    assert parsed.port is not None
    assert 0 < parsed.port < 65536


def test_the_port_and_the_prefix_are_kept() -> None:
    endpoint = runner.parse_url("http://[::1]:8000/prefix/v1/")
    assert endpoint.base == "http://[::1]:8000/prefix"
    assert runner.parse_url("https://h").base == "https://h"


# --- 3. endless streams: bounded, and a named failure --------------------------------------


def test_endless_valid_events_fail_once_the_text_cap_is_reached() -> None:
    with h.serving({("POST", "/v1/chat/completions"): h.endless_events}) as url:
        started = time.perf_counter()
        out = fetch(url, deadline=5.0)
    assert out.error == MALFORMED_SSE, out.detail
    assert "more than" in (out.detail or "")
    assert time.perf_counter() - started < 4.0  # not the deadline: the cap
    assert out.text == ""


def test_an_endless_line_fails_once_the_line_cap_is_reached() -> None:
    with h.serving({("POST", "/v1/chat/completions"): h.endless_line}) as url:
        started = time.perf_counter()
        out = fetch(url, deadline=5.0)
    assert out.error == MALFORMED_SSE, out.detail
    assert "longer than" in (out.detail or "")
    assert time.perf_counter() - started < 4.0


def test_a_long_event_split_in_small_pieces_is_read_whole() -> None:
    """Below the caps, an event of 600 kB arriving in 4 kB pieces is one chunk."""
    text = "y" * 600_000
    event = b"data: " + h.chunk(content=text) + b"\r\n\r\n"
    pieces = [event[i : i + 4096] for i in range(0, len(event), 4096)]
    tail = (b"data: " + h.usage(7) + b"\r\n\r\n", b"data: [DONE]\r\n\r\n")

    async def handler(request: web.Request) -> web.StreamResponse:
        return await h._sse(request, *pieces, *tail)

    with h.serving({("POST", "/v1/chat/completions"): handler}) as url:
        out = fetch(url)
    assert out.ok, out.detail
    assert out.text == text


# --- 4. every probe body is capped ---------------------------------------------------------


def big_json_body(size: int) -> h.Handler:
    """A valid JSON answer padded with whitespace to ``size`` bytes."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        pad = b" " * MB
        for _ in range(size // MB):
            await response.write(pad)
        await response.write(b'{"count": 5, "data": [{"id": "fake"}]}')
        await response.write_eof()
        return response

    return handler


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/v1/models"), ("GET", "/metrics"), ("POST", "/tokenize")]
)
def test_a_probe_body_over_the_cap_is_a_named_failure(
    capsys: pytest.CaptureFixture[str], shapes: Path, method: str, path: str
) -> None:
    routes = {
        (method, path): big_json_body(40 * MB),
        ("POST", "/v1/chat/completions"): h.good_stream(),
    }
    with h.serving(routes) as url:
        code, doc, _ = bench(capsys, shapes, url)
    if path == "/v1/models":
        assert code == 1
        assert doc["server"]["error"].startswith("too_large: /v1/models answered more than")
    else:
        assert code == 0
        assert any(path in f and "more than" in f for f in doc["findings"]), doc["findings"]


def test_an_endless_metrics_body_ends_at_the_cap(
    capsys: pytest.CaptureFixture[str], shapes: Path
) -> None:
    with h.serving(h.MODES["endless-metrics"]) as url:
        started = time.perf_counter()
        code, doc, _ = bench(capsys, shapes, url, "--request-timeout", "4")
    assert code == 0
    assert any("/metrics" in f and "more than" in f for f in doc["findings"])
    assert time.perf_counter() - started < 3.5


# --- 5. impossible usage counts ------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "prompt", "reasoning"),
    [
        (-1000, 5, None),
        (10**30, 5, None),
        (8, 5, None),  # max_tokens is 7
        (7, -5, None),
        (7, 10**30, None),
        (7, 5, 8),  # more reasoning tokens than completion tokens
        (7, 5, -1),
    ],
)
def test_impossible_usage_is_a_named_failure(
    capsys: pytest.CaptureFixture[str],
    shapes: Path,
    completion: int,
    prompt: int,
    reasoning: int | None,
) -> None:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    last = json.dumps({"choices": [], "usage": usage}).encode()

    async def handler(request: web.Request) -> web.StreamResponse:
        return await h._sse(
            request,
            b"data: " + h.chunk(content="ok") + b"\n\n",
            b"data: " + last + b"\n\n",
            b"data: [DONE]\n\n",
        )

    with h.serving({("POST", "/v1/chat/completions"): handler}) as url:
        code, doc, text = bench(capsys, shapes, url)
    assert code == 1
    assert errors_of(doc) == {MALFORMED_USAGE: 1}
    assert doc["shapes"][0]["metrics"]["output_tokens"] == 0
    assert "-1000 tokens" not in text


def test_usage_at_max_tokens_is_fine() -> None:
    with h.serving({("POST", "/v1/chat/completions"): h.good_stream(7, 0)}) as url:
        out = fetch(url, max_tokens=7)
    assert out.ok, out.detail
    assert (out.completion_tokens, out.prompt_tokens) == (7, 0)


# --- 6. secrets ------------------------------------------------------------------------------


def forms(secret: str) -> list[str]:
    raw = secret.encode()
    std = base64.b64encode(raw).decode()
    url = base64.urlsafe_b64encode(raw).decode()
    return [secret, std, std.rstrip("="), url, url.rstrip("=")]


KEY = "k3y?>>~~SECRET-0123456789"  # its base64 has "+" and "/": urlsafe differs
PW = "pa??ss>>word~SECRET"


def test_an_echoed_api_key_is_scrubbed_everywhere(
    capsys: pytest.CaptureFixture[str], shapes: Path, tmp_path: Path
) -> None:
    assert forms(KEY)[1] != forms(KEY)[3]
    out_file = tmp_path / "run.json"
    routes = {
        ("POST", "/v1/chat/completions"): echo_everything(),
        ("GET", "/v1/models"): h.models_of("served-" + base64.b64encode(KEY.encode()).decode()),
    }
    with h.serving(routes) as url:
        code, _, text = bench(capsys, shapes, url, "--api-key", KEY, "-o", str(out_file))
    assert code == 1
    written = out_file.read_text()
    for form in forms(KEY):
        assert form not in text
        assert form not in written
    assert "<redacted>" in written


def test_echoed_url_credentials_are_scrubbed_everywhere(
    capsys: pytest.CaptureFixture[str], shapes: Path, tmp_path: Path
) -> None:
    out_file = tmp_path / "run.json"
    with h.serving({("POST", "/v1/chat/completions"): echo_everything()}) as url:
        with_pw = url.replace("http://", "http://me:" + PW.replace("?", "%3F") + "@")
        code, _, text = bench(capsys, shapes, with_pw, "-o", str(out_file))
    assert code == 1
    written = out_file.read_text()
    for secret in (PW, f"me:{PW}"):
        for form in forms(secret):
            assert form not in text
            assert form not in written


def echo_everything() -> h.Handler:
    """401 with the Authorization header, the bare credential, and each base64 form of
    what it decodes to."""

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        auth = request.headers.get("Authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme == "Basic":
            plain = base64.b64decode(value).decode()
            echoed = [plain, plain.partition(":")[2], *forms(plain.partition(":")[2])]
        else:
            echoed = [value, *forms(value)]
        echoed += [base64.urlsafe_b64encode(value.encode()).decode()]
        body = "denied " + " | ".join(x for e in echoed for x in (e, e + "tail"))
        return web.Response(status=401, text=body[:1900])

    return handler


def test_a_token_in_the_url_path_is_sent_but_never_stored(
    capsys: pytest.CaptureFixture[str], shapes: Path
) -> None:
    token = "sk-abcdefghijklmnopqrstuvwxyz012345"
    seen: list[str] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        seen.append(request.path)
        return await h.good_stream()(request)

    prefix = f"/gw/{token}/v1"
    routes = {
        ("POST", f"/gw/{token}/v1/chat/completions"): chat,
        ("GET", f"/gw/{token}/v1/models"): h.models_of("fake"),
    }
    with h.serving(routes) as url:
        code, doc, text = bench(capsys, shapes, url + prefix + "/")
    assert code == 0, text
    assert set(seen) == {f"/gw/{token}/v1/chat/completions"}  # warm-up and measured
    assert token not in text
    assert doc["server"]["url"] == url + "/gw/<redacted>"


@pytest.mark.parametrize(
    ("url", "stored"),
    [
        ("http://h:1/v1", "http://h:1"),
        ("http://h:1/openai/v1", "http://h:1/openai"),
        ("http://h:1/api/my-model", "http://h:1/api/my-model"),
        ("http://h:1/key/abc", "http://h:1/<redacted>/<redacted>"),
        ("http://h:1/SECRETTOKEN", "http://h:1/<redacted>"),
        ("http://h:1/x/0123456789abcdef0123", "http://h:1/x/<redacted>"),
        ("http://h:1/x/%2Fabc", "http://h:1/x/<redacted>"),
        ("http://h:1/hf_abcdefghijklmnopqrstuvwx", "http://h:1/<redacted>"),
    ],
)
def test_the_stored_url_hides_path_segments_that_look_like_secrets(url: str, stored: str) -> None:
    assert runner.parse_url(url).display == stored


# --- 7. what the client keeps is bounded -----------------------------------------------------


def test_a_huge_model_id_and_error_body_are_kept_short(
    capsys: pytest.CaptureFixture[str], shapes: Path
) -> None:
    async def refuse(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=400, text="\x1b]0;x\x07" + "E" * 100_000)

    routes = {
        ("POST", "/v1/chat/completions"): refuse,
        ("GET", "/v1/models"): h.models_of("m" * 100_000, *(f"other{i}" for i in range(500))),
    }
    with h.serving(routes) as url:
        code, doc, _ = bench(capsys, shapes, url, "--model", "other1")
    assert code == 1
    assert all(len(m) <= runner.MAX_MODEL_ID_CHARS for m in doc["server"]["models"])
    assert len(doc["server"]["models"]) <= runner.MAX_MODELS_KEPT
    assert len(doc["shapes"][0]["samples"][0]["detail"]) <= client.MAX_DETAIL_CHARS
    assert len(json.dumps(doc)) < 100_000


def test_a_run_file_of_an_older_bench_keeps_no_path_token_in_the_facts() -> None:
    run = json.loads((FIXTURES / "tiny-moe-vllm-cpu.json").read_text())
    run["server"]["url"] = "http://127.0.0.1:18471/gw/sk-abcdefghijklmnopqrstuvwxyz012345"
    facts = read_bench(json.dumps(run).encode(), source="old.json")
    assert facts.url == "http://127.0.0.1:18471/gw/<redacted>"
    assert facts_redact_url(facts.url) == "http://<redacted>:18471/gw/<redacted>"
    assert (
        facts_redact_url("http://h:1/v1/0123456789abcdef0123")
        == "http://<redacted>:1/v1/<redacted>"
    )


def test_an_endless_gzip_metrics_body_ends_at_the_cap(
    capsys: pytest.CaptureFixture[str], shapes: Path
) -> None:
    """The cap counts the bytes as decompressed: a gzip bomb stops at it too."""
    with h.serving(h.MODES["gzip-metrics"]) as url:
        code, doc, _ = bench(capsys, shapes, url, "--request-timeout", "4")
    assert code == 0
    assert any("/metrics" in f and "more than" in f for f in doc["findings"])
