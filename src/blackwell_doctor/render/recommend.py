"""Recommendation → text: rich (a terminal), markdown (for a ticket), json, shell, compose.

The compose file is written by a small emitter rather than a YAML library: PyYAML is not a
dependency of the package, and the document is a fixed shape. Every scalar is written as a
JSON string (JSON's escapes are a subset of YAML's double-quoted style, so it parses the
same in YAML 1.1 and 1.2), numbers and booleans never appear unquoted where compose wants
strings, and "$" is doubled because compose interpolates "${VAR}" in every value.
"""

from __future__ import annotations

import json
import shlex
from typing import assert_never

from blackwell_doctor import TOOL_NAME
from blackwell_doctor.recommend.launch import (
    MODEL_DIR_PLACEHOLDER,
    LaunchSpec,
    docker_run_argv,
    is_placeholder,
    model_name,
)
from blackwell_doctor.recommend.plan import Action, Recommendation
from blackwell_doctor.render.common import (
    gpus_phrase,
    json_document,
    json_safe,
    sanitize,
    sanitize_line,
    scrub,
)
from blackwell_doctor.render.formats import RecommendFormat
from blackwell_doctor.render.markdown import cell, code, fence, hostname, prose

__all__ = ["NeedsLaunch", "RecommendFormat", "render_recommendation"]


class NeedsLaunch(Exception):
    """The format renders the container, and there is none (no --model-dir, or no GPU)."""


def render_recommendation(
    rec: Recommendation,
    fmt: RecommendFormat,
    spec: LaunchSpec | None,
    *,
    color: bool = False,
    width: int | None = None,
) -> str:
    """``spec`` is the container as apply would create it (secrets are never rendered).
    ``color`` and ``width`` (the terminal's; None: not fitted) matter to "rich" only.

    The recommendation quotes facts from other hosts (hostname, GPU names, findings): each
    format gets one sanitising step over the whole of it first (see render.render); the
    shell script's comments are one line each, so no value can start a command."""
    match fmt:
        case RecommendFormat.RICH:
            return render_terminal(scrub(rec, sanitize_line), color=color, width=width)
        case RecommendFormat.MARKDOWN:
            return render_markdown(scrub(rec, sanitize))
        case RecommendFormat.JSON:
            return render_json(scrub(rec, json_safe))
        case RecommendFormat.SHELL:
            return render_shell(scrub(rec, sanitize_line), _need(spec, rec))
        case RecommendFormat.COMPOSE:
            return render_compose(scrub(rec, sanitize_line), _need(spec, rec))
        case _:
            assert_never(fmt)


def _need(spec: LaunchSpec | None, rec: Recommendation) -> LaunchSpec:
    if spec is not None:
        return spec
    if rec.launch is None:
        raise NeedsLaunch("these facts show no GPU: there is no runtime to launch")
    raise NeedsLaunch("this format needs --model-dir DIR (the model, mounted read-only)")


_MODEL_NAME_PLACEHOLDER = model_name(MODEL_DIR_PLACEHOLDER)


def _shell_arg(arg: str) -> str:
    """One argument of the shell script; the placeholders become ${MODEL_DIR} and
    ${MODEL_NAME} inside double quotes (the rest of such an argument is shell-safe)."""
    if MODEL_DIR_PLACEHOLDER in arg or arg == _MODEL_NAME_PLACEHOLDER:
        text = arg.replace(MODEL_DIR_PLACEHOLDER, "${MODEL_DIR}")
        return '"' + ("${MODEL_NAME}" if arg == _MODEL_NAME_PLACEHOLDER else text) + '"'
    return shlex.quote(arg)


def _host_steps(rec: Recommendation) -> list[str]:
    """The host actions (driver, kernel command line, BIOS/ACS, ...) as commented steps in
    the plan's order: they need root and some a reboot, so the script never runs them."""
    steps = [a for a in rec.actions if a.id != "runtime"]
    if not steps:
        return []
    out = [
        "#",
        "# Host actions, in this order, before the launch below. They need root and some a",
        "# reboot: this script never runs them. Verify each as shown, then re-run",
        f"# `{TOOL_NAME} check`.",
    ]
    for n, a in enumerate(steps, 1):
        out.append(f"# {n}. {a.title}" + (f" ({', '.join(a.why)})" if a.why else ""))
        out += [f"#      {c}" for c in a.commands]
        out += [f"#      verify: {v}" for v in a.verify]
    out.append("#")
    return out


# --------------------------------------------------------------------------- rich


# The terminal view's styles (rich); the plain writer ignores them.
_STYLES = {
    "heading": "bold underline",
    "label": "bold",
    "command": "cyan",
    "dim": "dim",
    "fail": "bold red",
    "warn": "bold yellow",
}


def render_terminal(rec: Recommendation, *, color: bool, width: int | None) -> str:
    """The recommendation for a person at a terminal: the actions in order, each with why,
    the commands to run (each whole, however narrow the terminal), what to expect and how to
    verify; then the launch settings. Prose wraps to ``width``; Markdown is for tickets."""
    from blackwell_doctor.render.terminal import Item, Line, command, write_plain, write_styled

    def label(indent: int, name: str, text: str) -> Line:
        return Line(indent, ((text, ""),), lead=((f"{name}: ", "label"),), hang=indent + 4)

    h = rec.host
    out: list[Item] = [
        Line(0, ((f"{TOOL_NAME} recommendation", "heading"),)),
        Line(
            0,
            (
                (
                    f"host {h.hostname or 'unknown'} · GPUs {gpus_phrase(h) or 'none'} · "
                    f"driver {h.driver_version or 'unknown'} · source {h.source}",
                    "",
                ),
            ),
            hang=4,
        ),
    ]
    if not rec.actions:
        out += [Line(0, ()), Line(0, (("Nothing to do: no finding.", ""),))]
    else:
        out += [Line(0, ()), Line(0, (("Actions, in this order", "heading"),))]
        for n, a in enumerate(rec.actions, 1):
            why = f" ({', '.join(a.why)})" if a.why else ""
            out.append(Line(2, ((f"{a.title}{why}", ""),), lead=((f"{n}. ", "label"),)))
    for n, a in enumerate(rec.actions, 1):
        out += [Line(0, ()), Line(0, ((f"{n}. {a.title}", "heading"),), hang=4)]
        if a.findings:
            for f in a.findings:
                out.append(
                    Line(
                        2,
                        ((f.summary, ""),),
                        lead=((f"[{f.status}] ", f.status), (f"{f.id}: ", "label")),
                        hang=6,
                    )
                )
        else:
            out.append(Line(2, (("no finding; settings for this host", "dim"),)))
        if a.commands:
            out.append(Line(2, (("Commands:", "label"),)))
            out += [command(4, c, style="command") for c in a.commands]
        out.append(label(2, "Expected effect", a.effect.summary))
        out.append(label(2, "Source", a.effect.source))
        out.append(label(2, "Confidence", a.effect.confidence))
        out.append(Line(2, (("Verify afterwards:", "label"),)))
        out += [command(4, c, style="command") for c in a.verify]
        out += [label(2, "Note", note) for note in a.notes]
    if rec.launch is not None:
        la = rec.launch
        r = la.runtime
        pin = "pinned " + r.digest if r.pinned else "unpinned"
        out += [Line(0, ()), Line(0, (("Launch settings", "heading"),))]
        out.append(
            Line(
                2,
                (
                    (
                        f"{r.image} ({pin}, {'verified' if r.verified else 'unverified'}); "
                        f"needs driver {r.min_driver or '?'} (CUDA {r.cuda or '?'}), "
                        f"FlashInfer {r.flashinfer or '?'}",
                        "",
                    ),
                ),
                lead=((f"runtime {r.id}: ", "label"),),
                hang=6,
            )
        )
        for s in la.settings:
            out.append(Line(2, ((f"{s.name} = {s.value}", "command"),), hang=6))
            out.append(Line(6, ((s.why, "dim"),), hang=8))
        if la.docker_run is not None:
            out.append(Line(2, (("Run command (environment values exported as above):", "label"),)))
            out.append(command(4, shlex.join(la.docker_run), style="command"))
    if rec.notes:
        out.append(Line(0, ()))
        out += [label(0, "Note", note) for note in rec.notes]
    return write_styled(out, width, _STYLES) if color else write_plain(out, width)


# --------------------------------------------------------------------------- json


def render_json(rec: Recommendation) -> str:
    return json_document(rec)


# --------------------------------------------------------------------------- markdown


def _fence(lines: list[str]) -> list[str]:
    """A code block whose fence is longer than any backtick run in it (CommonMark: a
    shorter or equal run inside would close it), wherever in a line the run is."""
    marker = fence("\n".join(lines))
    return [f"{marker}sh", *lines, marker]


def _md_action(n: int, a: Action) -> list[str]:
    out = [f"### {n}. {prose(a.title)}", ""]
    if a.findings:
        out.append("**Why:** " + ", ".join(f"{code(f.id)} ({prose(f.status)})" for f in a.findings))
        out.append("")
        out += [f"- {code(f.id)}: {prose(f.summary)}" for f in a.findings]
    else:
        out.append("**Why:** no finding; settings for this host")
    out.append("")
    if a.commands:
        out += ["**Commands:**", "", *_fence(a.commands), ""]
    out += [
        f"**Expected effect:** {prose(a.effect.summary)}",
        f"*Source:* {prose(a.effect.source)}",
        f"*Confidence:* {prose(a.effect.confidence)}",
        "",
        "**Verify afterwards:**",
        "",
        *_fence(a.verify),
        "",
    ]
    if a.notes:
        out += ["**Notes:**", "", *[f"- {prose(n)}" for n in a.notes], ""]
    return out


def render_markdown(rec: Recommendation) -> str:
    h = rec.host
    out = [f"## {TOOL_NAME} recommendation", ""]
    out.append(
        f"Host: {hostname(h.hostname, 'unknown')} · GPUs: {prose(gpus_phrase(h) or 'none')} · "
        f"driver: {prose(h.driver_version or 'unknown')} · source: {code(h.source)}"
    )
    out.append("")
    if rec.actions:
        out += ["| # | action | why |", "|---|---|---|"]
        for n, a in enumerate(rec.actions, 1):
            why = ", ".join(code(i) for i in a.why) or "—"
            out.append(f"| {n} | {cell(prose(a.title))} | {cell(why)} |")
        out.append("")
        for n, a in enumerate(rec.actions, 1):
            out += _md_action(n, a)
    else:
        out += ["Nothing to do: no finding.", ""]
    if rec.launch is not None:
        la = rec.launch
        r = la.runtime
        pin = "pinned " + r.digest if r.pinned else "unpinned"
        out += [
            "### Launch settings",
            "",
            f"Runtime {code(r.id)}: {prose(r.image)} ({prose(pin)}, "
            f"{'verified' if r.verified else 'unverified'}); needs driver "
            f"{prose(r.min_driver or '?')} (CUDA {prose(r.cuda or '?')}), FlashInfer "
            f"{prose(r.flashinfer or '?')}.",
            "",
            "| setting | value | why |",
            "|---|---|---|",
        ]
        out += [
            f"| {cell(code(s.name))} | {cell(code(s.value))} | {cell(prose(s.why))} |"
            for s in la.settings
        ]
        out.append("")
        if la.docker_run is not None:
            out += ["Run command (environment values exported as above):", ""]
            out += [*_fence([shlex.join(la.docker_run)]), ""]
    out += [f"> {prose(n)}" for n in rec.notes]
    return "\n".join(out).rstrip("\n") + "\n"


# --------------------------------------------------------------------------- shell


def render_shell(rec: Recommendation, spec: LaunchSpec) -> str:
    """Exports, then ``docker run`` with ``--env NAME`` for each (values come from them)."""
    la = rec.launch
    out = [
        "#!/bin/sh",
        f"# {TOOL_NAME} recommend: {spec.runtime} ({spec.image}, "
        + ("pinned" if spec.pinned else "unpinned")
        + ")",
    ]
    if la is not None:
        out += [
            f"# {s.name}={s.value}: {s.why}"
            for s in la.settings
            if s.name == "tensor_parallel_size"
        ]
        out += [f"# note: {n}" for n in la.notes]
    out += _host_steps(rec)
    out.append("set -eu")
    if is_placeholder(spec):
        out += [
            "# No --model-dir was given: MODEL_DIR is a placeholder. Set it to the model's",
            "# directory on this host (mounted read-only), here or in the environment.",
            'MODEL_DIR="${MODEL_DIR:-}"',
            ': "${MODEL_DIR:?set MODEL_DIR to the model directory first}"',
            'MODEL_NAME="${MODEL_NAME:-$(basename "$MODEL_DIR")}"',
        ]
    why = {s.name: s.why for s in la.settings} if la is not None else {}
    for name, value in spec.env.items():
        if spec.is_secret(name):
            out.append(f"# {name}: secret, not printed; set it in the environment first")
            out.append(f': "${{{name}:?set {name} first}}"')
        else:
            if name in why:
                out.append(f"# {why[name]}")
            out.append("export " + shlex.quote(f"{name}={value}"))
    out.append(" ".join(_shell_arg(a) for a in docker_run_argv(spec)))
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- compose


def _q(value: str) -> str:
    """A compose scalar: JSON string syntax (valid YAML), "$" escaped for interpolation;
    the MODEL_DIR / MODEL_NAME placeholders become compose variables that must be set."""
    if value == MODEL_DIR_PLACEHOLDER:
        return json.dumps("${MODEL_DIR:?set MODEL_DIR to the model directory}")
    if value == _MODEL_NAME_PLACEHOLDER:
        return json.dumps("${MODEL_NAME:?set MODEL_NAME to the served model name}")
    return json.dumps(value.replace("$", "$$"))


def _key(value: str) -> str:
    return json.dumps(value)


def render_compose(rec: Recommendation, spec: LaunchSpec) -> str:
    service = "vllm"
    out = [
        f"# {TOOL_NAME} recommend --format compose: runtime {spec.runtime} "
        + ("(pinned)" if spec.pinned else "(unpinned: pin the digest you reviewed)"),
        "# Secrets are not written here: compose takes them from your environment.",
        *(
            [
                "# No --model-dir was given: set MODEL_DIR (the model directory, mounted",
                "# read-only) and MODEL_NAME (the served name) in the environment or in .env.",
            ]
            if is_placeholder(spec)
            else []
        ),
        *[
            f"# Host action {n}, before this (root; not done by compose): {a.title}"
            for n, a in enumerate((a for a in rec.actions if a.id != "runtime"), 1)
        ],
        "services:",
        f"  {_key(service)}:",
        f"    image: {_q(spec.image)}",
        f"    container_name: {_q(spec.name)}",
    ]
    if spec.entrypoint:
        out.append("    entrypoint:")
        out += [f"      - {_q(a)}" for a in spec.entrypoint]
    if spec.command:
        out.append("    command:")
        out += [f"      - {_q(a)}" for a in spec.command]
    if spec.env:
        out.append("    environment:")
        for name, value in spec.env.items():
            # ${NAME:?} makes compose fail when the secret is not set, rather than run
            # without it; the value itself never reaches this file.
            shown = json.dumps(f"${{{name}:?set {name}}}") if spec.is_secret(name) else _q(value)
            out.append(f"      {_key(name)}: {shown}")
    out += [
        "    ports:",
        f"      - {_q(spec.published)}",
        f"    ipc: {_q(spec.ipc_mode)}",
        *([f"    shm_size: {_q(spec.sized_shm)}"] if spec.sized_shm is not None else []),
        f"    restart: {_q(spec.restart)}",
        "    volumes:",
    ]
    for m in spec.mounts:
        out += [
            f"      - type: {_q(m.type)}",
            f"        source: {_q(m.source)}",
            f"        target: {_q(m.target)}",
        ]
        if m.read_only:
            out.append("        read_only: true")
    if spec.labels:
        out.append("    labels:")
        out += [f"      {_key(k)}: {_q(v)}" for k, v in spec.labels.items()]
    if spec.gpus:
        out += [
            "    deploy:",
            "      resources:",
            "        reservations:",
            "          devices:",
            f"            - driver: {_q('nvidia')}",
            f"              count: {_q('all')}",
            "              capabilities:",
            f"                - {_q('gpu')}",
        ]
    volumes = [m.source for m in spec.mounts if m.type == "volume"]
    if volumes:
        out.append("volumes:")
        out += [f"  {_key(v)}:" + "\n" + f"    name: {_q(v)}" for v in volumes]
    return "\n".join(out) + "\n"
