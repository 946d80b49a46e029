"""The README stays true: it opens with the two commands, and its job-file
reference names every key the loader accepts."""

from __future__ import annotations

import dataclasses
import typing

from tests.conftest import ROOT
from verl_zmq import config as C

README = (ROOT / "README.md").read_text()


def _keys(cls, prefix: str):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if f.name == "params":
            for pcls in C.ALGO_PARAMS.values():
                yield from _keys(pcls, f"{prefix}params.")
        elif dataclasses.is_dataclass(tp):
            yield from _keys(tp, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}"


def test_readme_opens_with_the_two_commands():
    first_block = README.split("```bash", 1)[1].split("```", 1)[0].strip().splitlines()
    assert [line.split()[:2] for line in first_block] == [["bash", "tools/run.sh"],
                                                           ["bash", "tools/test.sh"]]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash tools/test.sh" in ci


def test_reference_names_every_key():
    missing = [k for k in _keys(C.Job, "") if f"`{k}`" not in README]
    assert not missing, f"README reference lacks {missing}; run tools/gen_reference.py"


def test_setup_pins_torch():
    assert '"torch==2.13.0"' in (ROOT / "tools" / "setup.sh").read_text()
