"""`gradfuse.profiler.picture`: a profiled step drawn as HTML with inline SVG, parsed back
as XML: one rect per span placed and sized by its time, coloured by its direction, the
layer bars summing to the kernel time, names escaped, the step chosen by number."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from example_programs import record_conv_step  # tests/unit (conftest puts it on the path)

import gradfuse
from gradfuse.diagnostics import GradfuseError
from gradfuse.profiler import Span, Step, profile, schedule
from gradfuse.profiler.picture import (
    COLOURS,
    DIRECTIONS,
    LABEL_W,
    export_timeline,
    timeline_html,
    timeline_width,
)

SVG = "{http://www.w3.org/2000/svg}"
# A bar prints its µs to one decimal: off by at most half of 0.1, plus the float error of
# the difference itself (290.4 against 290.45 is 0.05000000000001 in float64).
PRINTED = 0.05 + 1e-9


def _conv_steps(backend: str) -> list[Step]:
    """Steps 1 and 2 of a conv net's SGD loop (3 iterations) with a feeder named `<x&y>`."""
    record_conv_step(3, feeder="<x&y>")
    with profile(schedule=schedule(wait=1, warmup=0, active=2)) as prof:
        gradfuse.execute(backend)
    assert [s.number for s in prof.steps] == [1, 2]
    return prof.steps


@pytest.fixture(scope="module")
def c_steps() -> list[Step]:
    return _conv_steps("c")


def _parse(html: str) -> ET.Element:
    head, rest = html.split("\n", 1)
    assert head == "<!DOCTYPE html>"
    return ET.fromstring(rest)  # the page is well-formed XML after its doctype


def _spans(root: ET.Element) -> list[ET.Element]:
    return [r for r in root.iter(SVG + "rect") if r.get("class") == "span"]


def _bars(root: ET.Element) -> dict[str, float]:
    """Layer -> the µs printed beside its bar."""
    out = {}
    for g in root.iter(SVG + "g"):
        if g.get("class") == "layer":
            title = g.find(SVG + "title")
            value = [t for t in g.iter(SVG + "text") if t.get("class") == "value"]
            assert title is not None and title.text and len(value) == 1
            out[title.text.rsplit(": ", 1)[0]] = float(value[0].text or "")
    return out


def _expected_colours(span: Span) -> list[str]:
    """The colours of a span's directions, top to bottom (host grey for none)."""
    return [COLOURS[d] for d in DIRECTIONS if span.shares.get(d)] or [COLOURS["host"]]


def _shown_colours(rect: ET.Element, root: ET.Element) -> list[str]:
    """The colours a rect shows, top to bottom: its fill or its gradient's stripes."""
    fill = rect.get("fill", "")
    if not fill.startswith("url(#"):
        return [fill]
    ident = fill[len("url(#") : -1]
    gradient = next(g for g in root.iter(SVG + "linearGradient") if g.get("id") == ident)
    stops = [s.get("stop-color", "") for s in gradient.iter(SVG + "stop")]
    return list(dict.fromkeys(stops))  # two stops per stripe


def test_one_rect_per_span_sized_by_its_time_and_coloured_by_direction(
    c_steps: list[Step],
) -> None:
    step = c_steps[0]
    root = _parse(timeline_html(c_steps))
    rects = _spans(root)
    assert len(rects) == len(step.spans)
    assert [r.get("data-kind") for r in rects] == [s.kind for s in step.spans]
    scale = timeline_width(step) / step.dur_us  # px per µs
    checked = 0
    for rect, span in zip(rects, step.spans):
        width, x = float(rect.get("width", "")), float(rect.get("x", ""))
        assert width == pytest.approx(max(span.dur_us * scale, 1.0), abs=0.006)
        assert x == pytest.approx(LABEL_W + (span.start_us - step.start_us) * scale, abs=0.006)
        checked += span.dur_us * scale > 5
        assert rect.get("data-direction") == span.direction
        assert _shown_colours(rect, root) == _expected_colours(span)
        lane_y = float(rect.get("y", ""))
        assert (lane_y > 60) == (span.kind in ("kernel", "copy"))  # the lower lane
    # widths proportional to µs, not all clamped to 1 px: the feeder and the receiver
    # (Python callbacks, 90-150 us) always; the kernels (5-9 us, 20-30 px) unless the
    # shared machine stalls a callback for milliseconds (one run in `make test` did)
    assert checked >= 2
    kinds = {s.kind for s in step.spans}
    assert {"kernel", "feeder", "receiver", "copy"} <= kinds
    assert any(len(s.shares) > 1 for s in step.spans)  # a mixed launch, drawn striped
    assert len(set(COLOURS.values())) == len(COLOURS)


def test_the_layer_bars_sum_to_the_kernel_time(c_steps: list[Step]) -> None:
    step = c_steps[0]
    bars = _bars(_parse(timeline_html(c_steps)))
    kernel_us = sum(s.dur_us for s in step.kernels())
    layers = {k: v for k, v in bars.items() if k != "host"}
    assert set(layers) == {name for s in step.kernels() for name in s.layer_shares}
    assert sum(layers.values()) == pytest.approx(kernel_us, abs=PRINTED * len(layers))
    host_us = sum(s.dur_us for s in step.spans if s.kind not in ("kernel", "op"))
    assert bars["host"] == pytest.approx(host_us, abs=PRINTED)
    assert list(bars.values()) == sorted(bars.values(), reverse=True)


def test_names_are_escaped_and_the_title_says_the_step(c_steps: list[Step]) -> None:
    html = timeline_html(c_steps)
    assert "<x&y>" not in html and "&lt;x&amp;y&gt;" in html
    root = _parse(html)
    feeder = next(r for r in _spans(root) if r.get("data-kind") == "feeder")
    title = feeder.find(SVG + "title")
    assert title is not None and (title.text or "").startswith("feeder <x&y>\n")
    step = c_steps[0]
    h1 = "".join(next(root.iter("h1")).itertext())
    assert h1 == f"ProfilerStep#1 · c · {step.dur_us:.1f} µs wall · {len(step.kernels())} kernels"
    assert "<script" not in html and "http://" not in html.replace(SVG[1:-1], "")


def test_the_step_is_chosen_by_number(c_steps: list[Step], tmp_path: Path) -> None:
    assert timeline_html(c_steps) == timeline_html(c_steps, step=1)
    assert "ProfilerStep#2" in timeline_html(c_steps, step=2)
    with pytest.raises(GradfuseError, match=r"step 5 was not recorded \(recorded: 1, 2\)"):
        timeline_html(c_steps, step=5)
    with pytest.raises(GradfuseError, match="no step"):
        timeline_html([])
    export_timeline(c_steps, tmp_path / "t.html", step=2)
    assert (tmp_path / "t.html").read_text(encoding="utf-8") == timeline_html(c_steps, step=2)
    with pytest.raises(GradfuseError, match="cannot write the timeline to"):
        export_timeline(c_steps, tmp_path / "missing" / "t.html")


def test_a_reference_step_draws_its_tg_ops_on_the_host_lane() -> None:
    steps = _conv_steps("reference")
    step = steps[0]
    root = _parse(timeline_html(steps))
    rects = _spans(root)
    assert len(rects) == len(step.spans) and any(s.kind == "op" for s in step.spans)
    assert all(float(r.get("y", "")) < 60 for r in rects)  # no kernels, no copies
    bars = _bars(root)
    ops = sum(s.dur_us for s in step.kernels())
    layers = [v for k, v in bars.items() if k != "host"]
    assert sum(layers) == pytest.approx(ops, abs=PRINTED * len(layers))


def test_a_large_step_stays_small_and_its_shortest_spans_show() -> None:
    """2000 synthetic launches (a Tacotron-sized step) of 0.01 to 50 µs over 60 layers."""
    spans = []
    t = 0.0
    for i in range(2000):
        dur = 0.01 if i % 3 else 50.0
        layer = f"decoder.cell<{i % 60}>"
        spans.append(Span(f"k{i}", "kernel", 0, t, dur, layer_shares={layer: 1.0},
                          shares={"forward": 0.5, "backward": 0.5}))  # fmt: skip
        t += dur + 0.5
    step = Step(0, 0.0, t, tuple(spans), "cuda")
    start = time.perf_counter()
    html = timeline_html([step])
    assert time.perf_counter() - start < 2.0
    assert len(html) < 2_000_000
    root = _parse(html)
    rects = _spans(root)
    assert len(rects) == 2000 and min(float(r.get("width", "")) for r in rects) == 1.0
    assert len(list(root.iter(SVG + "linearGradient"))) == 2  # the legend's and one mix
    bars = _bars(root)
    assert len(bars) == 30 and "(31 more layers)" in bars  # 29 layers and the rest
    assert "decoder.cell&lt;0&gt;" in html
    assert sum(bars.values()) == pytest.approx(sum(s.dur_us for s in spans), abs=PRINTED * 30)
