"""Mutations of `.tg` text for fuzzing `ir-opt` and `ir-run` (see `harness.py`).

Seeds are every `.tg` file of the repository, split at `// -----` like
`--split-input-file`. A mutant is a seed with one to three edits, each at the text
level (lines, characters, truncation, deep nesting) or at the token level (numbers
become huge, negative, zero, nan or 1e309; types change dims and element type; op
names change among the real ones; string keys get unicode, control characters and
escapes):

    rng = random.Random(0)
    name, text = rng.choice(seeds(ROOT))
    mutant, edits = mutate(text, rng)   # edits: ["number->1e309", "swap-lines"]
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path

SEED_DIRS = ("examples", "tests/filecheck", "tests/bad_inputs")

TOKEN = re.compile(
    r'"(?:[^"\\\n]|\\.)*"'  # a string
    r"|tensor<[^>]*>"  # a type
    r"|affine_(?:map|set)<[^\n]*?>(?=\s|$)"
    r"|[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*"  # an op name
    r"|-?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|inf)|nan"  # a number
    r"|%[A-Za-z0-9_$.\-]+|@[A-Za-z_][A-Za-z0-9_$.]*|[A-Za-z_]+"
    r"|[^\sA-Za-z0-9]"
)

NUMBERS = [
    "0", "-1", "1", "2", "-0.0", "1.5", "1e309", "-1e309", "nan", "inf", "-inf", "-1e40",
    "1e40", "9223372036854775807", "9223372036854775808", "18446744073709551616",
    "-9223372036854775809", "99999999999999999999999999", "4294967296", "65536", "3",
    "1000000000", "0.000001", "1e-320",
]  # fmt: skip
ELEMENTS = ["f32", "f64", "f16", "bf16", "i1", "i8", "i32", "i64"]
DIMS = ["0", "1", "2", "3", "4", "255", "1000000", "99999999999999999999", "4294967296"]
OP_NAMES = [
    "tg.add", "tg.sub", "tg.mul", "tg.div", "tg.max", "tg.cmplt", "tg.neg", "tg.exp2",
    "tg.log2", "tg.sqrt", "tg.recip", "tg.sin", "tg.erf", "tg.atan2", "tg.where", "tg.cast", "tg.dot",
    "tg.reduce_sum", "tg.reduce_max", "tg.sigmoid", "tg.tanh", "tg.relu", "tg.softmax",
    "tg.reduce_mean", "tg.stop_gradient", "tg.constant", "tg.reshape", "tg.permute",
    "tg.broadcast", "tg.slice", "tg.pad", "tg.concat", "tg.view", "tg.param", "tg.assign",
    "tg.feeder", "tg.receiver", "tg.for", "tg.yield", "tg.grad", "tg.gather",
    "tg.scatter_add", "tg.random", "tg.conv2d", "tg.conv_transpose2d", "tg.windows",
    "func.return", "tg.bogus",
]  # fmt: skip
KEYS = [
    "\\u12", "\\n", "\\x00", "\\\\", '\\"', "\\t\\r", "\\u00e9", "\\U0001F600", "\\q", "\\",
    "é", "日本語", "\u202e", "😀", "a\\nb", "../../etc/passwd", "/abs/path", "..", ".", "",
    "a/b", "x" * 300, "arg0", "result0", "param.w", "w", "x", "\\x7f", "\\0", "\\777",
]  # fmt: skip
CHARS = ["\x00", "\x07", "\x1b", "\t", "\r", "\ufeff", "é", "\u2028", "\\", '"', "{", "}",
         "(", ")", "[", "]", "<", ">", ",", ":", "=", "%", "@", "#", ";", "\n"]  # fmt: skip


def seeds(root: Path) -> list[tuple[str, str]]:
    """(name, text) of every `.tg` file under the seed folders, split at `// -----`."""
    found: list[tuple[str, str]] = []
    for folder in SEED_DIRS:
        for path in sorted((root / folder).rglob("*.tg")):
            text = path.read_bytes().decode("utf-8", "surrogateescape")
            rel = path.relative_to(root)
            for i, chunk in enumerate(re.split(r"^// -----\s*$", text, flags=re.M)):
                if chunk.strip():
                    found.append((f"{rel}#{i}", chunk))
    return found


def _tokens(text: str) -> list[re.Match[str]]:
    return list(TOKEN.finditer(text))


def _splice(text: str, m: re.Match[str], new: str) -> str:
    return text[: m.start()] + new + text[m.end() :]


def _pick(text: str, rng: random.Random, pattern: str) -> re.Match[str] | None:
    found = [m for m in _tokens(text) if re.fullmatch(pattern, m.group(0))]
    return rng.choice(found) if found else None


# --- token level ----------------------------------------------------------------


def _replace(
    text: str, rng: random.Random, pattern: str, label: str, make: Callable[[str], str]
) -> tuple[str, str]:
    """One token matching `pattern` replaced by `make(token)`; `label` names the edit."""
    m = _pick(text, rng, pattern)
    if m is None:
        return text, f"{label}:none"
    new = make(m.group(0))
    return _splice(text, m, new), f"{label}->{new}"


def number(text: str, rng: random.Random) -> tuple[str, str]:
    pattern = r"-?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|inf)|nan"
    return _replace(text, rng, pattern, "number", lambda _: rng.choice(NUMBERS))


def _other_type(token: str, rng: random.Random) -> str:
    *dims, elt = token[len("tensor<") : -1].split("x")
    how = rng.randrange(4)
    if how == 0:
        elt = rng.choice(ELEMENTS)
    elif how == 1 and dims:
        dims[rng.randrange(len(dims))] = rng.choice(DIMS)
    elif how == 2:
        dims.insert(rng.randrange(len(dims) + 1), rng.choice(DIMS[:4]))
    elif dims:
        dims.pop(rng.randrange(len(dims)))
    return "tensor<" + "".join(f"{d}x" for d in dims) + elt + ">"


def type_(text: str, rng: random.Random) -> tuple[str, str]:
    return _replace(text, rng, r"tensor<[^>]*>", "type", lambda t: _other_type(t, rng))


def op_name(text: str, rng: random.Random) -> tuple[str, str]:
    pattern = r"[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*"
    return _replace(text, rng, pattern, "op", lambda _: rng.choice(OP_NAMES))


def key(text: str, rng: random.Random) -> tuple[str, str]:
    m = _pick(text, rng, r'"(?:[^"\\\n]|\\.)*"')
    if m is None:
        return text, "key:none"
    inner = m.group(0)[1:-1]
    extra = rng.choice(KEYS)
    new = rng.choice([extra, inner + extra, extra + inner])
    return _splice(text, m, f'"{new}"'), f"key->{new[:20]!r}"


def token_edit(text: str, rng: random.Random) -> tuple[str, str]:
    toks = _tokens(text)
    if len(toks) < 2:
        return text, "token:none"
    a, b = sorted(rng.sample(range(len(toks)), 2))
    ta, tb = toks[a], toks[b]
    how = rng.randrange(3)
    if how == 0:
        return _splice(text, ta, ""), f"delete-token {ta.group(0)[:12]!r}"
    if how == 1:
        return _splice(text, ta, ta.group(0) + " " + ta.group(0)), "duplicate-token"
    swapped = (
        text[: ta.start()] + tb.group(0) + text[ta.end() : tb.start()] + ta.group(0)
        + text[tb.end() :]
    )  # fmt: skip
    return swapped, "swap-tokens"


# --- text level -----------------------------------------------------------------


def lines(text: str, rng: random.Random) -> tuple[str, str]:
    ls = text.splitlines(keepends=True)
    if len(ls) < 2:
        return text, "lines:none"
    i, j = rng.randrange(len(ls)), rng.randrange(len(ls))
    how = rng.randrange(3)
    if how == 0:
        del ls[i]
        return "".join(ls), "delete-line"
    if how == 1:
        ls.insert(j, ls[i])
        return "".join(ls), "duplicate-line"
    ls[i], ls[j] = ls[j], ls[i]
    return "".join(ls), "swap-lines"


def chars(text: str, rng: random.Random) -> tuple[str, str]:
    i = rng.randrange(len(text) + 1)
    if rng.random() < 0.5 and text:
        j = min(len(text), i + rng.randrange(1, 8))
        return text[:i] + text[j:], "delete-chars"
    c = rng.choice(CHARS)
    return text[:i] + c + text[i:], f"insert-char {c!r}"


def truncate(text: str, rng: random.Random) -> tuple[str, str]:
    return text[: rng.randrange(len(text) + 1)], "truncate"


def nest(text: str, rng: random.Random) -> tuple[str, str]:
    """Deep nesting: loops around a body, or a deep dense literal."""
    depth = rng.choice([50, 200, 1000, 3000])
    if rng.random() < 0.5:
        body = ["func @main(%x: tensor<2xf32>) {"]
        body += [f"tg.for %i{k} = 0 to 1 step 1 {{" for k in range(depth)]
        body += ["tg.yield\n}"] * depth + ["return %x" if rng.random() < 0.1 else "return", "}"]
        return "\n".join(body) + "\n", f"nest-loops {depth}"
    dense = "[" * depth + "1.0" + "]" * depth
    shape = "x".join(["1"] * min(depth, 8))
    prog = f"func @f() {{\n  %c = tg.constant dense<{dense}> : tensor<{shape}xf32>\n  return\n}}\n"
    return prog, f"nest-dense {depth}"


def loc(text: str, rng: random.Random) -> tuple[str, str]:
    """A `loc(...)` naming another file (whose lines must never be printed)."""
    ls = text.splitlines(keepends=True)
    ops = [i for i, line in enumerate(ls) if " = tg." in line or line.strip().startswith("tg.")]
    if not ops:
        return text, "loc:none"
    i = rng.choice(ops)
    target = rng.choice(['"/etc/passwd":1:1', '"/etc/hostname":1:1', '"x.tg":99:1'])
    ls[i] = ls[i].rstrip("\n") + f" loc({target})\n"
    return "".join(ls), f"loc {target}"


MUTATIONS: list[tuple[Callable[[str, random.Random], tuple[str, str]], int]] = [
    (number, 6), (type_, 5), (op_name, 4), (key, 4), (token_edit, 6), (lines, 5),
    (chars, 3), (truncate, 2), (nest, 1), (loc, 1),
]  # fmt: skip
"""Each mutation with its weight."""


def mutate(text: str, rng: random.Random) -> tuple[str, list[str]]:
    """The text with one to three random edits, and what they were."""
    fns, weights = zip(*MUTATIONS)
    edits: list[str] = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        fn = rng.choices(fns, weights)[0]
        text, what = fn(text, rng)
        edits.append(what)
    return text, edits
