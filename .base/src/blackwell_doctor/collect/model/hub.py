"""``model ORG/NAME[@REVISION] --hub``: config, index and safetensors headers read from the
Hugging Face Hub (or the mirror HF_ENDPOINT names) over HTTP, never a weight.

Through ``huggingface_hub`` (2.4) as it talks to the Hub: the endpoint and the token as it
reads them (HF_ENDPOINT; HF_TOKEN, else the saved token), its HTTP session, its URLs
(``hf_hub_url``: ``/{repo}/resolve/{commit}/{file}``) and headers (``build_hf_headers``),
and ``HfApi.model_info(files_metadata=True)`` (``/api/models/{repo}/revision/{rev}``), one
request that pins the revision to a commit and gives every file's size. Every file is then
read at that commit.

A header is read as the library's ``parse_safetensors_file_metadata`` reads one (hf_api.py):
a first range request of 100,000 bytes ("97% of safetensors files have a metadata size <
100kb"), a second for the rest of a longer header. Two things differ, for a reason each: the
first range grows to the longest header seen so far (the shards of one checkpoint have
headers of about one size, so a 250 KB header takes one request a shard, not two), and a
response is read as a stream and left after the bytes asked for, so that a server that
ignores Range sends no weights here (the library reads the whole response). The header is
then checked and folded by the same code as on disk (``header.parse_header``: its limits,
the offsets against the file's size), never by ``json.loads`` of what a server sent.

The token is sent only by the library's headers and is never part of a message: the words
of an HTTP failure are this module's own, and any text from elsewhere has the token
replaced before it is kept.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from blackwell_doctor.collect.model.header import (
    MAX_HEADER_BYTES,
    Header,
    HeaderError,
    parse_header,
)
from blackwell_doctor.collect.model.hfcache import CacheError, RepoSpec
from blackwell_doctor.collect.model.jsondoc import decode_json
from blackwell_doctor.collect.model.scan import MAX_JSON_BYTES, ModelFiles, read_model
from blackwell_doctor.facts.model import ModelFacts, ModelProblem, ModelSource

if TYPE_CHECKING:
    import httpx2

# parse_safetensors_file_metadata's first range (huggingface_hub hf_api.py, 2.4).
FIRST_RANGE = 100_000
# Shard headers in flight at once (huggingface_hub's hf_thread_map default is 8 workers).
WORKERS = 8
_CHUNK = 1 << 16


class HubError(CacheError):
    """The repo cannot be read from the Hub; one line, exit 2."""


def _endpoint_shown(endpoint: str) -> str:
    """scheme://host[:port] of ``endpoint``: never a user, password, path or query."""
    parts = urlsplit(endpoint)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}"


@dataclass
class _Remote:
    repo: str
    commit: str
    endpoint: str
    shown: str  # the endpoint as messages say it
    # Only to scrub it from text (the library's headers send it); out of every repr.
    token: str | None = field(repr=False)
    sizes: dict[str, int]  # top-level file -> bytes
    headers_base: dict[str, str] = field(default_factory=dict, repr=False)

    def scrub(self, text: str) -> str:
        one = " ".join(text.split())
        return one.replace(self.token, "***") if self.token else one


class HubFiles:
    """A Hub repository at one commit, as :class:`~.scan.ModelFiles`."""

    def __init__(self, remote: _Remote) -> None:
        self._r = remote
        self._first = FIRST_RANGE

    # ModelFiles -------------------------------------------------------------------------
    def has(self, name: str) -> bool:
        return name in self._r.sizes

    def names(self, suffix: str) -> list[str]:
        return sorted(n for n in self._r.sizes if n.endswith(suffix))

    def read_json(self, name: str) -> Any:
        size = self._r.sizes.get(name)
        if size is None:
            raise HeaderError(f"missing (not in {self._r.repo} at commit {self._r.commit})")
        if size > MAX_JSON_BYTES:
            raise HeaderError(f"{size} bytes, above the {MAX_JSON_BYTES}-byte limit")
        data, _ = self._get(name, 0, MAX_JSON_BYTES + 1)
        if len(data) > MAX_JSON_BYTES:
            raise HeaderError(f"more than the {MAX_JSON_BYTES}-byte limit sent")
        return decode_json(data)

    def headers(self, names: list[str]) -> Iterator[tuple[str, Header | HeaderError]]:
        if not names:
            return
        # The first alone: its header's length sets the first range of the others.
        yield names[0], self._header(names[0])
        rest = iter(names[1:])
        with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="hub-header") as pool:
            while window := list(itertools.islice(rest, WORKERS)):
                yield from zip(window, pool.map(self._header, window), strict=True)

    def link_problem(self, name: str) -> ModelProblem | None:
        return None

    # HTTP -------------------------------------------------------------------------------
    def _header(self, name: str) -> Header | HeaderError:
        size = self._r.sizes.get(name)
        if size is None:
            return HeaderError(f"missing (not in {self._r.repo} at commit {self._r.commit})")
        try:
            if size < 8:
                raise HeaderError(f"truncated: {size} bytes, shorter than the 8-byte length")
            first = min(self._first, size)
            data, _ = self._get(name, 0, first)
            if len(data) < 8:
                raise HeaderError("truncated while reading the 8-byte length")
            n = int.from_bytes(data[:8], "little")
            if n > MAX_HEADER_BYTES:
                raise HeaderError(
                    f"header length {n} bytes exceeds the {MAX_HEADER_BYTES}-byte limit "
                    "(corrupt, or not a safetensors file)"
                )
            if 8 + n > size:
                raise HeaderError(
                    f"header length {n} bytes runs past the end of the {size}-byte file "
                    "(truncated upload, or a length that lies)"
                )
            raw = data[8 : 8 + n]
            if len(raw) < n:
                more, _ = self._get(name, len(data), 8 + n - len(data))
                raw += more
                if len(raw) < n:
                    raise HeaderError(f"the server sent {len(raw)} of {n} header bytes")
            # The next shards' first range: this header and a little more, if longer.
            self._first = max(self._first, min(8 + n + n // 8 + 4096, MAX_HEADER_BYTES + 8))
            return parse_header(raw, data_bytes=size - 8 - n, file_bytes=size, check_entries=False)
        except HeaderError as exc:
            return exc

    def _get(self, name: str, start: int, length: int) -> tuple[bytes, int]:
        """Bytes [start, start + length) of ``name`` by one range request (status code as
        well); a server that ignores Range is read only as far as those bytes."""
        from huggingface_hub import constants, get_session, hf_hub_url

        url = hf_hub_url(self._r.repo, name, revision=self._r.commit, endpoint=self._r.endpoint)
        headers = {**self._r.headers_base, "Range": f"bytes={start}-{start + length - 1}"}
        try:
            with get_session().stream(
                "GET", url, headers=headers, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT
            ) as response:
                return self._body(response, name, start, length), response.status_code
        except HeaderError:
            raise
        except Exception as exc:  # httpx2's transport errors, the library's offline mode
            raise HeaderError(
                f"cannot read from {self._r.shown}: "
                + self._r.scrub(f"{type(exc).__name__}: {exc}")[:200]
            ) from None

    def _body(self, response: httpx2.Response, name: str, start: int, length: int) -> bytes:
        status = response.status_code
        if status == 404:
            raise HeaderError(f"missing (the server answers 404 for {name})")
        if status in (401, 403):
            raise HeaderError(f"the server refuses it (HTTP {status}; HF_TOKEN grants no access)")
        if status not in (200, 206):
            raise HeaderError(f"the server answers HTTP {status}")
        skip = start if status == 200 else 0  # Range ignored: the file from its first byte
        buf = bytearray()
        for chunk in response.iter_bytes(_CHUNK):
            if skip:
                drop = min(skip, len(chunk))
                chunk, skip = chunk[drop:], skip - drop
            buf += chunk
            if len(buf) >= length:
                break
        return bytes(buf[:length])


def read_hub_model(spec: RepoSpec, *, endpoint: str | None = None) -> ModelFacts:
    """``spec`` read from the Hub (``endpoint``, else HF_ENDPOINT as the library reads it):
    the commit its revision names, then config, quantization description, index and every
    shard's header at that commit. HubError (one line) when
    the repo or revision cannot be had; a file that cannot be read is a problem, as on
    disk."""
    from huggingface_hub import HfApi, constants, get_token
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    # Public (the library's reference documents huggingface_hub.utils.build_hf_headers); its
    # lazy __init__ re-exports it in a form mypy does not count as an export.
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

    # The library's warnings would print below the CLI (nothing below it prints).
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
    shown = _endpoint_shown(endpoint)
    token = get_token()
    if constants.is_offline_mode():
        raise HubError(
            f"{spec.text}: --hub reads from {shown} but HF_HUB_OFFLINE is set: unset it, or "
            "leave out --hub to read the local cache"
        )
    scrub = _Remote(spec.repo, "", endpoint, shown, token, {}).scrub
    try:
        info = HfApi(endpoint=endpoint).model_info(
            spec.repo,
            revision=spec.revision,
            files_metadata=True,
            timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT,
        )
    except RevisionNotFoundError:
        raise HubError(f"{spec.repo}: no revision {spec.revision!r} on {shown}") from None
    except GatedRepoError:
        raise HubError(
            f"{spec.repo} on {shown} is gated: accept its terms on the Hub and set HF_TOKEN "
            "to a token of that account"
        ) from None
    except RepositoryNotFoundError:
        raise HubError(
            f"{spec.repo}: no such model repository on {shown} (or it is private and HF_TOKEN "
            "grants no access to it)"
        ) from None
    except OfflineModeIsEnabled:
        raise HubError(f"{spec.text}: --hub but HF_HUB_OFFLINE is set") from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise HubError(f"{spec.repo}: {shown} answers HTTP {status}") from None
    except Exception as exc:  # transport errors (httpx2), a reply that is not model info
        raise HubError(
            f"{spec.repo}: cannot read it from {shown}: "
            + scrub(f"{type(exc).__name__}: {exc}")[:200]
        ) from None
    commit = info.sha
    if not isinstance(commit, str) or not commit:
        raise HubError(f"{spec.repo}: {shown} names no commit for revision {spec.revision!r}")
    sizes: dict[str, int] = {}
    for sibling in info.siblings or []:
        name, size = sibling.rfilename, sibling.size
        if "/" in name or not isinstance(size, int) or size < 0:
            continue  # files in folders are not the model's (the index names only its own)
        sizes[name] = size
    remote = _Remote(
        repo=spec.repo,
        commit=commit,
        endpoint=endpoint,
        shown=shown,
        token=token,
        sizes=sizes,
        headers_base=build_hf_headers(token=token),
    )
    source = ModelSource(
        kind="hub", repo=spec.repo, revision=spec.revision, commit=commit, location=shown
    )
    files: ModelFiles = HubFiles(remote)
    return read_model(files, label=f"{spec.repo}@{commit[:12]}", source=source)
