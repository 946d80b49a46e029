#!/usr/bin/env python
"""Print the job-file reference (every key, type, default, unit, note) as
Markdown, from the dataclasses in verl_zmq/config/sections.py. The README's reference is
this output; tests/test_docs.py checks that it names every key.

    python tools/gen_reference.py                   # print it
    python tools/gen_reference.py --write README.md  # replace it between the markers
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing

from verl_zmq import config as C

UNITS = {"_s": "seconds", "_steps": "env steps", "_updates": "updates"}


def _type(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " \\| ".join(f'"{a}"' for a in typing.get_args(tp))
    if origin is list:
        return f"array of {_type(typing.get_args(tp)[0])}"
    if origin in (typing.Union, __import__("types").UnionType):
        return " or ".join(_type(a) for a in typing.get_args(tp) if a is not type(None)) + \
            (" (optional)" if type(None) in typing.get_args(tp) else "")
    return {int: "int", float: "float", str: "string", bool: "bool", dict: "table"}.get(
        tp, getattr(tp, "__name__", str(tp)))


def _notes(cls) -> dict[str, str]:
    out = {}
    for line in inspect.getsource(cls).splitlines():
        m = re.match(r"\s+(\w+):.*#\s*(.+)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def _default(f) -> str:
    if f.default is not dataclasses.MISSING:
        v = f.default
    elif f.default_factory is not dataclasses.MISSING:
        v = f.default_factory()
    else:
        return ""
    if dataclasses.is_dataclass(v) or v is None:
        return "-" if v is None else ""
    return f"`{C._tval(v)}`"


def table(cls, prefix: str) -> list[str]:
    rows = []
    hints = typing.get_type_hints(cls)
    notes = _notes(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp) or f.name == "params":
            continue
        unit = next((u for s, u in UNITS.items() if f.name.endswith(s)), "")
        rows.append(f"| `{prefix}{f.name}` | {_type(tp)} | {_default(f)} | {unit} | "
                    f"{notes.get(f.name, '')} |")
    return rows


def render() -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        _print()
    return buf.getvalue()


def main() -> None:
    import sys
    from pathlib import Path

    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        path = Path(sys.argv[2])
        text = path.read_text()
        start = text.index("<!-- reference:start")
        start = text.index("\n", start) + 1
        end = text.index("<!-- reference:end -->")
        path.write_text(text[:start] + render() + text[end:])
        return
    print(render(), end="")


def _print() -> None:
    head = ["| key | type | default | unit | notes |", "| --- | --- | --- | --- | --- |"]
    sections = [(f.name, typing.get_type_hints(C.Job)[f.name]) for f in dataclasses.fields(C.Job)]
    for name, cls in sections:
        print(f"#### [{name}]\n\n{inspect.getdoc(cls)}\n")
        lines = table(cls, f"{name}.")
        for sub in dataclasses.fields(cls):
            tp = typing.get_type_hints(cls)[sub.name]
            if dataclasses.is_dataclass(tp):
                lines += table(tp, f"{name}.{sub.name}.")
        if name == "algorithm":
            print("\n".join(head + lines) + "\n")
            for algo, pcls in C.ALGO_PARAMS.items():
                print(f"`[algorithm.params]` when `name = \"{algo}\"`: {inspect.getdoc(pcls)}\n")
                print("\n".join(head + table(pcls, "algorithm.params.")) + "\n")
            continue
        print("\n".join(head + lines) + "\n")


if __name__ == "__main__":
    main()
