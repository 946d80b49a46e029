"""The README and docs/ stay true: the README opens with the two commands and
stays short; every link resolves; every code block parses (TOML loads, Python
compiles, a `verl check` or `verl-launch` command runs its checks, with
`--dry-run` where it would start a job); the generated references are current
and name every key; every metric key the code logs is in the glossary; and no
doc holds an absolute path of a machine, or a commit hash or a date outside
docs/benchmarks.md."""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import shlex
import subprocess
import sys
import tomllib
import typing

import pytest

from tests.conftest import ROOT
from verl_zmq import config as C

README = (ROOT / "README.md").read_text()
DOCS = sorted([ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "tools" / "README.md",
               *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
# paths inside a Kubernetes pod, or the placeholders of a dry-run's output
ALLOWED_PATHS = ("/var/lib/verl", "/etc/verl")


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


def test_readme_opens_with_the_two_commands_and_stays_short():
    first_block = README.split("```bash", 1)[1].split("```", 1)[0].strip().splitlines()
    assert [line.split()[:2] for line in first_block] == [["bash", "tools/run.sh"],
                                                           ["bash", "tools/test.sh"]]
    assert "bash tools/test.sh" in (ROOT / ".ci" / "run").read_text()
    assert len(README.splitlines()) <= 300
    assert len((ROOT / "ARCHITECTURE.md").read_text().splitlines()) <= 300


def test_every_link_resolves():
    bad = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                bad.append(f"{doc.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md":
                heads = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                         for h in re.findall(r"^#+ (.*)$", dest.read_text(), re.M)}
                if anchor not in heads:
                    bad.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not bad, bad


def _commands(text: str):
    for lang, body in FENCE.findall(text):
        if lang not in ("bash", "sh", ""):
            continue
        for line in body.splitlines():
            cmd = line.split("#", 1)[0].strip().removeprefix("$ ")
            if cmd.startswith(("verl-launch ", "verl check ")):
                yield cmd


@pytest.mark.e2e
def test_every_launch_and_check_command_in_the_docs_runs_its_checks():
    """What a reader copies works: `verl check` as written, `verl-launch` with
    --dry-run (all its checks, nothing started). Commands on files the reader
    writes first (hosts.txt, myjob.toml), on a run folder or on a cluster are
    skipped."""
    from click.testing import CliRunner

    from launcher.cli import main as launch_main
    from verl_zmq.cli import main as verl_main

    ran: set[str] = set()
    cwd = os.getcwd()
    os.chdir(ROOT)  # the commands name files from the checkout's root
    try:
        for doc in DOCS:
            for cmd in _commands(doc.read_text()):
                argv = shlex.split(cmd)
                files = [a for a in argv[1:] if a.endswith((".toml", ".txt"))]
                # k8s, Slurm and Ray need their cluster (test_k8s, test_slurm_real and
                # test_ray_target run those commands on real ones)
                clusters = {"k8s", "slurm", "ray", "--ray"}
                if "<" in cmd or clusters & set(argv) or argv[1].startswith("ray:") \
                        or "--resume" in argv \
                        or not all((ROOT / f).exists() for f in files) \
                        or "tests/data/" in cmd or "runs/" in cmd or cmd in ran \
                        or "mypkg" in cmd:  # the reader's own modules: test_extending.py
                    continue
                # in this process (the programs' own entry points, as the console
                # scripts call them): an interpreter per command cost seconds each
                if argv[0] == "verl-launch":
                    prog, args = launch_main, ["--dry-run", *[a for a in argv[1:]
                                                              if a != "--dry-run"]]
                else:
                    prog, args = verl_main, argv[1:]
                r = CliRunner().invoke(prog, args)
                assert r.exit_code == 0, f"{doc.relative_to(ROOT)}: {cmd}\n{r.output[-1500:]}"
                ran.add(cmd)
    finally:
        os.chdir(cwd)
    assert len(ran) >= 4


def test_every_toml_and_python_block_parses():
    for doc in DOCS:
        for lang, body in FENCE.findall(doc.read_text()):
            where = f"{doc.relative_to(ROOT)}: {body[:60]!r}"
            if lang == "toml":
                tomllib.loads(body)
            elif lang == "python":
                ast.parse(body, where)


def test_the_generated_references_are_current_and_name_every_key():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_reference",
                                                  ROOT / "tools" / "gen_reference.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for rel, render in gen.FILES.items():
        text = (ROOT / rel).read_text()
        assert gen.between_markers(text) == render(), \
            f"{rel} is stale: python tools/gen_reference.py --write"
    ref = (ROOT / "docs" / "reference" / "job-file.md").read_text()
    missing = [k for k in _keys(C.Job, "") if f"`{k}`" not in ref]
    assert not missing, f"the job-file reference lacks {missing}"
    assert gen.missing_notes() == [], "keys without a note: a comment beside or above each"


def test_the_reference_generator_fails_on_a_key_without_a_note(tmp_path):
    import dataclasses
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_reference",
                                                  ROOT / "tools" / "gen_reference.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)

    @dataclasses.dataclass
    class Planted:
        noted: int = 1  # a note
        # a note above
        above: int = 2
        bare: int = 3

    assert [r.split("`")[1] for r in gen.table(Planted, "x.") if r.endswith("|  |")] == ["x.bare"]
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_reference.py"), "--check"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr


def test_every_metric_key_the_code_logs_is_in_the_glossary():
    glossary = (ROOT / "docs" / "guides" / "monitoring.md").read_text()
    from verl_zmq.config.roles import ROLES

    # a peer logs a learner's keys (the glossary says so once, under `learner/`)
    prefixes = "|".join(("losses", "charts", "grpo", "gossip", "eval",
                         *(r for r in ROLES if r != "peer")))
    pattern = re.compile(rf"\"((?:{prefixes})/[a-z_0-9]+)\"")
    found = {m for p in (ROOT / "verl_zmq").rglob("*.py") for m in pattern.findall(p.read_text())}
    learner = {f"learner/{m}" for p in (ROOT / "verl_zmq").rglob("*.py")
               for m in re.findall(r"f\"\{r\}/([a-z_0-9]+)\"", p.read_text())}
    missing = sorted(k for k in found | learner if k not in glossary)
    assert not missing, f"docs/guides/monitoring.md lacks {missing}"


def test_no_doc_holds_a_machine_path_a_commit_hash_or_a_date():
    abs_path = re.compile(r"(?<![\w.~<>/])/(?:work|tmp|root|home|scratch|opt|usr|srv|var|etc|"
                          r"Users|mnt)/[^\s`)'\"]*")
    commit = re.compile(r"(?<![\w-])[0-9a-f]{7,40}(?![\w-])")
    date = re.compile(r"\b20\d\d-\d\d-\d\d\b")
    bad = []
    for doc in DOCS:
        text = doc.read_text()
        rel = str(doc.relative_to(ROOT))
        bad += [f"{rel}: path {m}" for m in abs_path.findall(text)
                if not m.startswith(ALLOWED_PATHS)]
        if rel == "docs/benchmarks.md":
            continue
        bad += [f"{rel}: date {m}" for m in date.findall(text)]
        bad += [f"{rel}: commit {m}" for m in commit.findall(text)
                if re.search(r"[a-f]", m) and re.search(r"\d", m)]
    assert not bad, bad[:20]


def test_setup_pins_torch():
    assert '"torch==2.13.0"' in (ROOT / "tools" / "setup.sh").read_text()
