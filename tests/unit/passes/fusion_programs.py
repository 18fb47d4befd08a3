"""Random tg programs for fusion and lowering tests (hypothesis strategies).

Each program is .tg text: params, a feeder, then a random mix of elementwise
ops, broadcasts, permutes, reductions and contractions over small shapes,
some params updated in place and everything received at the end.
"""

from __future__ import annotations

from hypothesis import strategies as st

DIMS = (2, 3, 4)


def _t(shape: tuple[int, ...]) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}f32>"


@st.composite
def programs(draw, steps: int = 2, max_ops: int = 10) -> str:
    """A random training-like program as .tg text."""
    a, b = draw(st.sampled_from(DIMS)), draw(st.sampled_from(DIMS))
    lines = [f'    %x = tg.feeder "x" : {_t((a, b))}']
    values: list[tuple[str, tuple[int, ...]]] = [("%x", (a, b))]
    params = [("p0", (b, b)), ("p1", (b,)), ("p2", (a, b))]
    for key, shape in params:
        lines.append(f'    %{key} = tg.param "{key}" init=0.{len(key) + 2} : {_t(shape)}')
        values.append((f"%{key}", shape))
    n = 0

    def new(shape: tuple[int, ...], text: str) -> None:
        nonlocal n
        name = f"%v{n}"
        n += 1
        lines.append(f"    {name} = {text} : {_t(shape)}")
        values.append((name, shape))

    for _ in range(draw(st.integers(2, max_ops))):
        kind = draw(st.sampled_from(["unary", "binary", "bcast", "permute", "reduce", "dot"]))
        name, shape = draw(st.sampled_from(values))
        if kind == "unary":
            op = draw(st.sampled_from(["tg.neg", "tg.sin", "tg.exp2", "tg.sigmoid", "tg.tanh"]))
            new(shape, f"{op} {name}")
        elif kind == "binary":
            same = [v for v, s in values if s == shape]
            other = draw(st.sampled_from(same))
            op = draw(st.sampled_from(["tg.add", "tg.mul", "tg.sub", "tg.max"]))
            new(shape, f"{op} {name}, {other}")
        elif kind == "bcast" and len(shape) == 1:
            rows = draw(st.sampled_from(DIMS))
            new((1, shape[0]), f"tg.reshape {name}")
            new((rows, shape[0]), f"tg.broadcast {values[-1][0]}")
        elif kind == "permute" and len(shape) == 2:
            new((shape[1], shape[0]), f"tg.permute {name} perm=[1, 0]")
        elif kind == "reduce" and len(shape) == 2:
            dim = draw(st.sampled_from([0, 1]))
            op = draw(st.sampled_from(["tg.reduce_sum", "tg.reduce_max"]))
            new((shape[1 - dim],), f"{op} {name} dims=[{dim}]")
        elif kind == "dot" and len(shape) == 2:
            rhs = [v for v, s in values if len(s) == 2 and s[0] == shape[1]]
            if rhs:
                other = draw(st.sampled_from(rhs))
                width = dict(values)[other][1]
                new((shape[0], width), f"tg.dot {name}, {other}")
    # Update params in place from values of their shape, receive something.
    for key, shape in params:
        same = [v for v, s in values if s == shape and v != f"%{key}"]
        if same and draw(st.booleans()):
            upd = draw(st.sampled_from(same))
            new(shape, f"tg.mul {upd}, %{key}")
            new(shape, f"tg.sub %{key}, {values[-1][0]}")
            lines.append(f'    tg.assign "{key}", {values[-1][0]}')
    last = values[-1][0]
    lines.append(f'    tg.receiver "out", {last}')
    body = "\n".join(lines)
    return (
        "func @main() {\n"
        f"  tg.for %i = 0 to {steps} step 1 {{\n{body}\n    tg.yield\n  }}\n"
        '  %f0 = tg.param "p0" : tensor<' + "".join(f"{d}x" for d in params[0][1]) + "f32>\n"
        '  tg.receiver "final", %f0\n'
        "  return\n}\n"
    )
