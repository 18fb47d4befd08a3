"""A picture of one recorded step, for those who would rather look than read: a
self-contained HTML page (inline SVG and CSS; no script, font or network) with the
step's timeline and, beside it, the time per layer.

    import gradfuse
    from gradfuse.profiler import profile, schedule
    from gradfuse.profiler.picture import export_timeline
    with profile(schedule=schedule(wait=1, warmup=1, active=2)) as prof:
        gradfuse.execute("c")
    export_timeline(prof.steps, "step.html")              # the first recorded step
    export_timeline(prof.steps, "step3.html", step=3)     # ProfilerStep#3

The timeline has two lanes: the host (feeder and receiver callbacks, and the tg ops the
reference interpreter times) and the kernels with the param copies (as trace.py puts
them on the device stream). Each span is one `<rect class="span">` placed by its start
and duration from the step's start, at least 1 px wide so that the shortest launch
shows; hovering shows its `<title>`: name, layers, direction, µs, FLOPs and bytes.
Colours are by direction: forward, backward and optimizer each have their own; a launch
that fuses several directions (`fprop 60% bprop 40%`) is drawn as stacked stripes, top
to bottom forward, backward, optimizer, each as tall as its share (a hard-stopped
vertical gradient, so it is still one rect, and a 1 px launch still shows its mix);
callbacks, copies and launches with no direction are grey (host). The time axis is
900 px, or 3 px a span for long steps (at most 8000 px, scrolling beside the bars).

The bars are `key_averages(group_by="layer")` of the step: each span's time split by
its layer shares, callbacks and copies under `host`, launches of no module under
`(no module)`; the largest first, those past the 30th summed in one last bar.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from pathlib import Path

from gradfuse.diagnostics import GradfuseError
from gradfuse.profiler.steps import Span, Step, pick
from gradfuse.profiler.tables import key_averages
from gradfuse.profiler.text import si
from gradfuse.profiler.trace import DEVICE_KINDS

DIRECTIONS = ("forward", "backward", "optimizer")
COLOURS = {"forward": "#4e79a7", "backward": "#f28e2b", "optimizer": "#59a14f",
           "host": "#a5a5a5"}  # fmt: skip
"""Fill per direction; a mixed launch stripes these (see the module docstring)."""
LEGEND = ("forward", "backward", "optimizer", "mixed", "host")
SEPARATE = ' stroke="#fff" stroke-width="0.5"'
"""A thin white edge between neighbouring spans of 4 px or more (narrower ones stay whole)."""

LABEL_W, LANE_H, GAP, TOP, AXIS_H = 96, 28, 10, 30, 34
"""Timeline geometry (px): lane labels, lane height, gap, legend row, axis."""
MAX_BARS, BAR_H, BAR_W = 30, 18, 240
"""Layer chart: bars drawn before the rest are summed, bar height, longest bar."""

STYLE = """
body { font: 13px sans-serif; margin: 16px; color: #222; }
h1 { font-size: 17px; margin: 0 0 4px; }
p.sub { margin: 0 0 12px; color: #555; }
.row { display: flex; gap: 24px; align-items: flex-start; }
.timeline { flex: 1 1 auto; min-width: 0; overflow-x: auto; }
.layers { flex: 0 0 auto; }
h2 { font-size: 14px; margin: 0 0 6px; }
svg text { font: 11px sans-serif; fill: #222; }
svg text.in { fill: #fff; pointer-events: none; }
rect.span:hover, rect.bar:hover { stroke: #000; stroke-width: 1.5; }
"""


def timeline_html(steps: Sequence[Step], step: int | None = None) -> str:
    """The page of step number `step` of `steps` (default: the first of `steps`)."""
    chosen = pick(steps, step)
    kernels = chosen.kernels()
    kernel_us = sum(s.dur_us for s in kernels)
    host_us = sum(s.dur_us for s in chosen.spans) - kernel_us
    title = (f"{chosen.name} · {chosen.backend} · {chosen.dur_us:.1f} µs wall ·"
             f" {len(kernels)} kernels")  # fmt: skip
    share = 100 * kernel_us / chosen.dur_us if chosen.dur_us > 0 else 0.0
    sub = (f"kernels {kernel_us:.1f} µs ({share:.1f} % of the step), callbacks and copies"
           f" {host_us:.1f} µs, {len(chosen.spans)} spans")  # fmt: skip
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"/>',
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1><p class=\"sub\">{escape(sub)}</p>",
        '<div class="row"><div class="timeline"><h2>Timeline (µs from the step start)</h2>',
        timeline_svg(chosen),
        '</div><div class="layers"><h2>Time per layer (µs)</h2>',
        layers_svg(chosen),
        "</div></div></body></html>",
        "",
    ])  # fmt: skip


def export_timeline(steps: Sequence[Step], path: str | Path, step: int | None = None) -> None:
    """Writes `timeline_html(steps, step)` to `path` (UTF-8)."""
    text = timeline_html(steps, step)
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as err:
        raise GradfuseError(f"cannot write the timeline to {path}: {err.strerror}") from None


def _num(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _fill(span: Span, gradients: dict[tuple[tuple[str, float], ...], str]) -> str:
    """The span's fill: its direction's colour, a striped gradient for a mix, else host."""
    parts = tuple((d, round(span.shares[d], 3)) for d in DIRECTIONS if span.shares.get(d))
    if not parts:
        return COLOURS["host"]
    if len(parts) == 1:
        return COLOURS[parts[0][0]]
    return f"url(#{gradients.setdefault(parts, f'mix{len(gradients)}')})"


def _gradient(ident: str, parts: Sequence[tuple[str, float]]) -> str:
    """A vertical gradient with hard stops: one stripe per direction, its share tall."""
    total, at, stops = sum(s for _, s in parts) or 1.0, 0.0, []
    for d, s in parts:
        end = at + s / total
        for offset in (at, end):
            stops.append(f'<stop offset="{offset:.4f}" stop-color="{COLOURS[d]}"/>')
        at = end
    head = f'<linearGradient id="{ident}" x1="0" y1="0" x2="0" y2="1">'
    return head + "".join(stops) + "</linearGradient>"


def _tooltip(span: Span, offset_us: float) -> str:
    layers = [f"{name} {100 * share:.0f}%" for name, share in span.layer_shares.items()]
    if len(layers) > 8:
        layers = [*layers[:8], f"+{len(layers) - 8} more"]
    lines = [
        f"{span.kind} {span.name}",
        f"layers: {', '.join(layers) or '-'}",
        f"direction: {span.direction}",
        f"{span.dur_us:.2f} µs at +{offset_us:.2f} µs",
        f"FLOPs {si(span.flops)}, read {si(span.bytes_read)} B, written {si(span.bytes_written)} B",
    ]
    if span.source:
        lines.append(f"source: {span.source}")
    return escape("\n".join(lines))


def _ticks(dur_us: float) -> list[float]:
    """Axis ticks at 1, 2 or 5 x 10^k µs, about 8 over the step."""
    if dur_us <= 0:
        return [0.0]
    raw = dur_us / 8
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(dur_us / step) + 1)]


def timeline_width(step: Step) -> int:
    """Px for the step's time: 900, or 3 px per span for long steps, at most 8000."""
    return min(max(900, 3 * len(step.spans)), 8000)


def timeline_svg(step: Step) -> str:
    """The step's timeline as an `<svg>`: legend, a host lane, a kernel lane, µs axis."""
    width = timeline_width(step)
    scale = width / step.dur_us if step.dur_us > 0 else 0.0
    lanes = {"host": TOP, "kernels, copies": TOP + LANE_H + GAP}
    axis_y = TOP + 2 * LANE_H + 2 * GAP
    height, full = axis_y + AXIS_H, LABEL_W + width + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{full}"'
           f' height="{height}" viewBox="0 0 {full} {height}">']  # fmt: skip
    gradients: dict[tuple[tuple[str, float], ...], str] = {}
    body: list[str] = []
    x = LABEL_W
    for name in LEGEND:  # the legend row
        if name == "mixed":
            gradients[(("forward", 1.0), ("backward", 1.0), ("optimizer", 1.0))] = "legendmix"
            fill = "url(#legendmix)"
        else:
            fill = COLOURS[name]
        body.append(f'<rect class="legend" x="{x}" y="6" width="14" height="14" fill="{fill}"/>'
                    f'<text x="{x + 18}" y="17">{name}</text>')  # fmt: skip
        x += 28 + 7 * len(name)
    for label, y in lanes.items():
        body.append(f'<rect class="lane" x="{LABEL_W}" y="{y}" width="{width}"'
                    f' height="{LANE_H}" fill="#f3f3f3"/>'
                    f'<text x="4" y="{y + LANE_H / 2 + 4:.0f}">{label}</text>')  # fmt: skip
    for span in step.spans:
        offset = span.start_us - step.start_us
        x0 = LABEL_W + max(offset, 0.0) * scale
        w = max(span.dur_us * scale, 1.0)
        y = lanes["kernels, copies" if span.kind in DEVICE_KINDS else "host"]
        body.append(
            f'<rect class="span" data-kind="{span.kind}" data-direction="{escape(span.direction)}"'
            f' x="{_num(x0)}" y="{y + 2}" width="{_num(w)}" height="{LANE_H - 4}"'
            f' fill="{_fill(span, gradients)}"{SEPARATE * (w >= 4)}>'
            f"<title>{_tooltip(span, offset)}</title></rect>"
        )
        if w >= 7 * len(span.name) + 6:
            body.append(f'<text class="in" x="{_num(x0 + 3)}" y="{y + LANE_H / 2 + 4:.0f}">'
                        f"{escape(span.name)}</text>")  # fmt: skip
    body.append(f'<line x1="{LABEL_W}" y1="{axis_y}" x2="{LABEL_W + width}" y2="{axis_y}"'
                ' stroke="#444"/>')  # fmt: skip
    ticks = _ticks(step.dur_us)
    wide = len(ticks) > 1 and ticks[1] >= 1  # whole µs: 100,000 rather than 100000
    for t in ticks:
        tx, label = _num(LABEL_W + t * scale), f"{t:,.0f}" if wide else _num(t)
        body.append(f'<line class="tick" x1="{tx}" y1="{axis_y}" x2="{tx}" y2="{axis_y + 5}"'
                    f' stroke="#444"/><text x="{tx}" y="{axis_y + 18}" text-anchor="middle">'
                    f"{label}</text>")  # fmt: skip
    body.append(f'<text x="{LABEL_W + width + 8}" y="{axis_y + 4}">µs</text>')
    out.append("<defs>" + "".join(_gradient(i, p) for p, i in gradients.items()) + "</defs>")
    return "\n".join([*out, *body, "</svg>"])


def layer_times(step: Step) -> list[tuple[str, float]]:
    """(layer, µs) of the step, the largest first: `key_averages(group_by="layer")`."""
    rows = key_averages([step], "layer", False)[1:]  # [0] is the ProfilerStep* row
    return sorted(((r.key, r.self_time_total_us) for r in rows), key=lambda kv: -kv[1])


def layers_svg(step: Step) -> str:
    """The time per layer as an `<svg>` of horizontal bars with their µs."""
    rows = layer_times(step)
    if len(rows) > MAX_BARS:
        rest = rows[MAX_BARS - 1 :]
        rows = [*rows[: MAX_BARS - 1], (f"({len(rest)} more layers)", sum(us for _, us in rest))]
    label_w = 8 + 6.5 * min(max((len(name) for name, _ in rows), default=4), 40)
    top = max((us for _, us in rows), default=0.0) or 1.0
    full, height = int(label_w + BAR_W + 90), BAR_H * len(rows) + 8
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="layers" width="{full}"'
           f' height="{height}" viewBox="0 0 {full} {height}">']  # fmt: skip
    for i, (name, us) in enumerate(rows):
        y, w = 4 + i * BAR_H, max(BAR_W * us / top, 1.0)
        shown = name if len(name) <= 40 else name[:39] + "…"
        fill = COLOURS["host"] if name == "host" else "#76b7b2"
        out.append(
            f'<g class="layer"><title>{escape(name)}: {us:.1f} µs</title>'
            f'<text x="{label_w - 6:.0f}" y="{y + 12}" text-anchor="end">{escape(shown)}</text>'
            f'<rect class="bar" x="{label_w:.0f}" y="{y + 2}" width="{_num(w)}"'
            f' height="{BAR_H - 4}" fill="{fill}"/>'
            f'<text class="value" x="{label_w + w + 4:.0f}" y="{y + 12}">{us:.1f}</text></g>'
        )
    return "\n".join([*out, "</svg>"])


__all__ = ["export_timeline", "layer_times", "timeline_html", "timeline_svg"]
