"""Splitting PromQL into the parts whose data an end-to-end test asks for: enough of PromQL for our rules
and dashboards (tests/integration/test_e2e_alerts.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    | (?P<braces>\{(?:[^{}"']|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')*\})
    | (?P<range>\[[^\]]*\])
    | (?P<num>(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)(?:ms|s|m|h|d|w|y)*)
    | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
    | (?P<op>==|!=|>=|<=|=~|!~|[-+*/%^<>(),])
    )""",
    re.X,
)
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
COMPARISONS = {"==", "!=", ">", "<", ">=", "<="}
MODIFIERS = {"on", "ignoring", "group_left", "group_right", "bool"}


@dataclass(frozen=True)
class Tok:
    kind: str
    text: str
    start: int
    end: int


def tokenize(expr: str) -> list[Tok]:
    """PromQL tokens; a `{...}` label matcher and a `[...]` range are one token each."""
    toks, pos = [], 0
    while pos < len(expr):
        if not expr[pos:].strip():
            break
        m = _TOKEN.match(expr, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"cannot tokenize {expr[pos : pos + 40]!r}")
        kind = m.lastgroup or ""
        toks.append(Tok(kind, m.group(kind), m.start(kind), m.end(kind)))
        pos = m.end()
    return toks


def selectors(expr: str) -> list[str]:
    """Every metric selector in `expr` (`name` or `name{matchers}`), in order, without duplicates."""
    toks, out = tokenize(expr), []
    i = 0
    while i < len(toks):
        t = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if t.kind == "ident" and t.text in {"by", "without", *MODIFIERS} and nxt and nxt.text == "(":
            while toks[i].text != ")":  # a label list, not selectors
                i += 1
        elif t.kind == "ident" and t.text not in KEYWORDS and not (nxt and nxt.text in ("(", "by", "without")):
            sel = t.text + (nxt.text if nxt and nxt.kind == "braces" else "")
            if sel not in out:
                out.append(sel)
        i += 1
    return out


def _depth0(toks: list[Tok]) -> list[int]:
    """Indexes of tokens outside any parentheses (an outermost pair's own tokens included)."""
    depth, out = 0, []
    for i, t in enumerate(toks):
        depth -= t.text == ")"
        if depth == 0:
            out.append(i)
        depth += t.text == "("
    return out


def _unwrap(expr: str) -> str:
    """`expr` without parentheses that enclose all of it (`(a > 1)` -> `a > 1`, not `(a) or (b)`)."""
    while True:
        toks = tokenize(expr)
        if not toks or toks[0].text != "(" or toks[-1].text != ")" or _depth0(toks) != [0, len(toks) - 1]:
            return expr.strip()
        expr = expr[toks[0].end : toks[-1].start]


def _split(expr: str, ops: set[str]) -> list[str] | None:
    """`expr` split at its outermost operators in `ops` (with their on/ignoring/group modifiers), or None."""
    toks = tokenize(expr)
    cuts = [i for i in _depth0(toks) if toks[i].text in ops]
    if not cuts:
        return None
    parts, start = [], 0
    for c in [*cuts, len(toks)]:
        if start >= len(toks):
            raise ValueError(f"operator without right-hand side in {expr!r}")
        while toks[start].text in MODIFIERS:  # `or on (a, b) rhs`: drop the modifier, keep rhs
            start += 1
            if start < len(toks) and toks[start].text == "(":
                while toks[start].text != ")":
                    start += 1
                start += 1
        end = toks[c - 1].end if c > 0 else 0
        parts.append(expr[toks[start].start : end])
        start = c + 1
    return parts


def split_condition(expr: str) -> list[str]:
    """The parts of a condition that must each have data for the condition to be able to hold.

    `a or b` -> parts of a and of b; `a and b` -> parts of a and of b; `x > 10` -> x (the side
    that is not a number; both sides are kept for `x < y`, where y joins by labels). An `unless`
    and anything else is one part. Comparisons bind tighter than and/or/unless, as in PromQL.
    """
    expr = _unwrap(expr)
    for ops in ({"or"}, {"and"}):
        parts = _split(expr, ops)
        if parts is not None:
            return [p for part in parts for p in split_condition(part)]
    if _split(expr, {"unless"}) is not None:
        return [expr]
    parts = _split(expr, COMPARISONS)
    if parts is not None:
        sides = [_unwrap(p) for p in parts]
        values = [s for s in sides if not re.fullmatch(r"[-+]?[\d.eE+-]+", s)]
        return [p for v in values for p in split_condition(v)]
    return [expr]
