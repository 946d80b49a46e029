#!/usr/bin/env python
"""The generated references: the job file's (every key, type, default, unit,
note, from the dataclasses in verl_zmq/config/) and the command line's (every
command's --help, from the click commands). tests/test_docs.py checks that the
files under docs/reference/ are this output.

    python tools/gen_reference.py            # print the job-file reference
    python tools/gen_reference.py --cli      # print the command-line reference
    python tools/gen_reference.py --write    # rewrite both files between their markers
    python tools/gen_reference.py --missing  # the keys without a note (there must be none)
    python tools/gen_reference.py --check    # exit 1 while a key has no note
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
    """Each field's note: its line's trailing comment, else the comment lines
    right above it (joined); a field inherited from a base class, the base's."""
    out: dict[str, str] = {}
    for base in reversed(cls.__mro__[1:]):
        if dataclasses.is_dataclass(base):
            out.update(_notes(base))
    above: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        if re.match(r"\s+#", line):
            above.append(line.strip().lstrip("#").strip())
            continue
        m = re.match(r"\s+(\w+):[^#]*?(?:#\s*(.+))?$", line)
        if m and not line.strip().startswith(("def ", "@", '"')):
            note = m.group(2) or " ".join(above)
            if note:
                out[m.group(1)] = note.strip()
        above = []
    return out


def missing_notes() -> list[str]:
    """Keys of the job file whose reference row has no note."""
    return [row.split("`")[1] for row in render().splitlines()
            if row.startswith("| `") and row.rstrip().endswith("|  |")]


def _default(f) -> str:
    if f.default is not dataclasses.MISSING:
        v = f.default
    elif f.default_factory is not dataclasses.MISSING:
        v = f.default_factory()
    else:
        return ""
    if dataclasses.is_dataclass(v) or v is None:
        return "-" if v is None else ""
    return f"`{C.toml_value(v)}`"


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


def render_cli() -> str:
    """Every command's help, as a user sees it with -h (80 columns)."""
    import click

    from launcher.cli import main as launch_main
    from verl_zmq.cli import main as verl_main

    out = []
    for prog, cmd in (("verl-launch", launch_main), ("verl", verl_main)):
        names = [None] if not isinstance(cmd, click.Group) else [None, *sorted(cmd.commands)]
        for name in names:
            sub = cmd if name is None else cmd.commands[name]
            if getattr(sub, "hidden", False):
                continue
            title = prog if name is None else f"{prog} {name}"
            parent = click.Context(cmd, info_name=prog, help_option_names=["-h", "--help"])
            ctx = click.Context(sub, info_name=title if name is None else name,
                                parent=None if name is None else parent, terminal_width=80,
                                help_option_names=["-h", "--help"],
                                max_content_width=80)
            out.append(f"### `{title}`\n\n```text\n{sub.get_help(ctx).rstrip()}\n```\n")
    return "\n".join(out)


def render_wiring() -> str:
    """ARCHITECTURE.md's table of the data flow, from config/wiring.py."""
    from verl_zmq.config.wiring import table

    return table()


FILES = {"docs/reference/job-file.md": render, "docs/reference/command-line.md": render_cli,
         "ARCHITECTURE.md": render_wiring}


def between_markers(text: str) -> str:
    start = text.index("\n", text.index("<!-- reference:start")) + 1
    return text[start:text.index("<!-- reference:end -->")]


def main() -> None:
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if sys.argv[1:] == ["--missing"]:
        print("\n".join(missing_notes()))
        return
    if missing := missing_notes():
        print(f"error: job-file keys without a note: {', '.join(sorted(set(missing)))}; "
              f"write one in a comment beside the field (or above it) in "
              f"verl_zmq/config/", file=sys.stderr)
        sys.exit(1)
    if sys.argv[1:] == ["--check"]:
        return
    if sys.argv[1:] == ["--write"]:
        for rel, fn in FILES.items():
            path = root / rel
            text = path.read_text()
            start = text.index("\n", text.index("<!-- reference:start")) + 1
            end = text.index("<!-- reference:end -->")
            path.write_text(text[:start] + fn() + text[end:])
        return
    print(render_cli() if sys.argv[1:] == ["--cli"] else render(), end="")


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
