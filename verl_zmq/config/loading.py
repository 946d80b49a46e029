"""Reading a job: TOML and `--set key=value` overrides into the section
dataclasses, each value converted to its key's type; unknown keys, wrong types
and bad values fail with the file, the dotted key, what was expected and, for
misspelt keys, a did-you-mean."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import tomllib
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from .algorithms import ALGO_PARAMS, NAMES, row
from .checks import check_semantics
from .sections import REQUIRED_SECTIONS, Algorithm, ConfigError, Job


def load_job(path: str | Path, overrides: Sequence[str] = ()) -> Job:
    """Read, override and validate a job file; raise ConfigError naming file and key."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read job file: {e.strerror or e}") from None
    return loads_job(text, str(path), overrides)


def loads_job(text: str, source: str = "<job>", overrides: Sequence[str] = ()) -> Job:
    """Like load_job, from TOML text; `source` names it in errors."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: TOML syntax error: {e}") from None
    for item in overrides:
        apply_override(raw, item, source)
    try:
        return build_job(raw, source)
    except ForeignParams as e:
        named = [i for i in overrides if i.split("=", 1)[0].strip() == "algorithm.name"]
        if named:  # the name changed, not the params: say so
            e.args = (f"--set {named[-1]}: " + str(e).removeprefix(f"{source}: "),)
        params = raw.get("algorithm", {}).get("params", {})
        rest = {k: v for k, v in params.items() if k not in e.keys}
        replay = {**raw.get("replay", {}), "mode": "auto"}  # the other's mode, likely
        with contextlib.suppress(ConfigError):
            e.job = build_job({**raw, "algorithm": {**raw["algorithm"], "params": rest},
                               "replay": replay}, source)
        raise
    except ConfigError as e:
        raise ConfigError(blame_override(str(e), source, overrides)) from None


def override_keys(overrides: Sequence[str]) -> set[str]:
    """The dotted keys that `--set` items name."""
    return {item.split("=", 1)[0].strip() for item in overrides}


def blame_override(message: str, source: str, overrides: Sequence[str]) -> str:
    """A problem with a key that `--set` gave is `--set`'s, not the job file's:
    "job.toml: training.x: ..." becomes "--set training.x=1: ..."."""
    if not message.startswith(f"{source}: "):
        return message
    rest = message[len(source) + 2:]
    head = rest.split(";")[0]
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if any(rest.startswith(f"{key}{c}") for c in ":[ ") \
                or rest.startswith(f"unknown key {key}") or f" {key} " in f" {head} ":
            return f"--set {item}: {rest}"
    return message


def parse_override(item: str) -> tuple[list[str], Any]:
    """`section.key=value`: the value is a TOML value if it parses, else a string."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected section.key=value")
    key, _, value = item.partition("=")
    parts = [p.strip() for p in key.strip().split(".")]
    if len(parts) < 2 or not all(parts):
        raise ConfigError(f"--set {item!r}: expected a dotted key like training.total_timesteps")
    try:
        parsed = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()
    return parts, parsed


def apply_override(raw: dict[str, Any], item: str, source: str = "<job>") -> None:
    parts, value = parse_override(item)
    node = raw
    for p in parts[:-1]:
        nxt = node.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"{source}: --set {item!r}: {'.'.join(parts[:-1])} is not a table")
        node = nxt
    node[parts[-1]] = value


def build_job(raw: dict[str, Any], source: str = "<job>") -> Job:
    missing = [s for s in REQUIRED_SECTIONS if s not in raw]
    if missing:
        raise ConfigError(
            f"{source}: missing section [{missing[0]}]; a job file needs "
            + ", ".join(f"[{s}]" for s in REQUIRED_SECTIONS)
        )
    job: Job = _build_dataclass(Job, raw, "", source)
    if job.replay.mode == "auto":  # what the algorithm needs
        mode: Any = job.traits.replay_modes[0]
        job = dataclasses.replace(job, replay=dataclasses.replace(job.replay, mode=mode))
    check_semantics(job, source)
    return job


def _did_you_mean(key: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _build_dataclass(cls: Any, raw: Any, prefix: str, source: str) -> Any:
    where = prefix.rstrip(".") or "top level"
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: {where}: expected a table, got {_tname(raw)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    if cls in ALGO_PARAMS.values():
        _foreign_params(cls, raw, prefix, source)
    for key in raw:
        if key not in fields:
            valid = ", ".join(sorted(fields))
            raise ConfigError(
                f"{source}: unknown key {prefix}{key}{_did_you_mean(key, fields)}; "
                f"valid keys in {where}: {valid}"
            )
    kwargs = {}
    for name in fields:
        if name not in raw:
            continue
        key = f"{prefix}{name}"
        if cls is Algorithm and name == "params":
            continue
        kwargs[name] = _convert(raw[name], hints[name], key, source)
    if cls is Algorithm:
        algo = kwargs.get("name", "ppo")
        if algo not in NAMES and ":" not in algo:
            raise ConfigError(f"{source}: {prefix}name: expected one of "
                              f"{', '.join(repr(n) for n in NAMES)}, or a \"module:Class\" "
                              f"of your own, got {algo!r}{_did_you_mean(algo, NAMES)}")
        try:
            params_class = row(algo).params
        except KeyError as e:
            raise ConfigError(f"{source}: {e.args[0]}") from None
        kwargs["params"] = _build_dataclass(
            params_class, raw.get("params", {}), f"{prefix}params.", source
        )
    return cls(**kwargs)


class ForeignParams(ConfigError):
    """`[algorithm.params]` written for another algorithm than `algorithm.name` (a job
    whose name was changed by `--set`): `raw` is the job's table with those keys
    left out, for a check of what else the change means (the action space)."""

    def __init__(self, message: str, name: str, owner: str, keys: list[str]):
        super().__init__(message)
        self.name, self.owner, self.keys = name, owner, keys
        self.job: Job | None = None  # the job without those keys, where it builds


def _foreign_params(cls: type, raw: dict[str, Any], prefix: str, source: str) -> None:
    """ForeignParams when every unknown key of `raw` is another algorithm's."""
    from .algorithms import example_job

    own = {f.name for f in dataclasses.fields(cls)}
    unknown = [k for k in raw if k not in own]
    name = next(n for n, c in ALGO_PARAMS.items() if c is cls)
    if not unknown:
        return
    for owner, other in ALGO_PARAMS.items():
        theirs = {f.name for f in dataclasses.fields(other)}
        if other is not cls and all(k in theirs for k in unknown):
            raise ForeignParams(
                f"{source}: {prefix.rstrip('.')}: {', '.join(unknown)} are {owner}'s keys, "
                f"not {name}'s: the job's [algorithm.params] were written for {owner}; start "
                f"from a {name} job ({example_job(name)}) and give it this [environment], or "
                f"remove those keys", name, owner, unknown)


def _tname(v: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a float", str: "a string",
            list: "an array", dict: "a table"}.get(type(v), type(v).__name__)


def _convert(value: Any, tp: Any, key: str, source: str) -> Any:  # noqa: C901 - one per type
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _build_dataclass(tp, value, key + ".", source)
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            hint = _did_you_mean(str(value), [str(c) for c in choices])
            raise ConfigError(
                f"{source}: {key}: expected one of {', '.join(map(repr, choices))}, "
                f"got {value!r}{hint}"
            )
        return value
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(value, a, key, source)
            except ConfigError as e:
                errors.append(e)
        names = " or ".join(_expect(a) for a in args if a is not type(None))
        raise ConfigError(f"{source}: {key}: expected {names}, got {_tname(value)} {value!r}")
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{source}: {key}: expected {_expect(tp)}, got {_tname(value)}")
        (item,) = typing.get_args(tp)
        return [_convert(v, item, f"{key}[{i}]", source) for i, v in enumerate(value)]
    if tp is dict or origin is dict:
        return _table(value, tp, key, source)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{source}: {key}: expected true or false, got {_tname(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{source}: {key}: expected an integer, got {_tname(value)} "
                              f"{value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{source}: {key}: expected a number, got {_tname(value)} "
                              f"{value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            _not_an_object(value, key, source)
            raise ConfigError(f"{source}: {key}: expected a string, got {_tname(value)}")
        return value
    if tp is Any:
        return value
    raise ConfigError(f"{source}: {key}: unsupported type {tp}")  # pragma: no cover


def _table(value: Any, tp: Any, key: str, source: str) -> dict[str, Any]:
    """A table; of tables where its values are a dataclass (`dict[str, Section]`)."""
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {key}: expected a table, got {_tname(value)}")
    args = typing.get_args(tp)
    if len(args) == 2 and dataclasses.is_dataclass(args[1]):
        return {k: _build_dataclass(args[1], v, f"{key}.{k}.", source)
                for k, v in value.items()}
    return dict(value)


def _not_an_object(value: Any, key: str, source: str) -> None:
    """A class or function given where its import path belongs (the Python API): a
    ConfigError saying which path to write."""
    if callable(value) and hasattr(value, "__module__") and hasattr(value, "__qualname__"):
        kind = "class" if isinstance(value, type) else "function"
        script = value.__module__ == "__main__"
        mod = "mymodule" if script else value.__module__
        move = "; move it out of the script into mymodule.py" if script else ""
        raise ConfigError(f"{source}: {key}: got the {kind} {value.__qualname__} itself; name "
                          f"it by its import path instead, \"{mod}:{value.__qualname__}\" "
                          f"(every role imports it in its own process{move})")


def _expect(tp: Any) -> str:
    if typing.get_origin(tp) is list:
        return f"an array of {_expect(typing.get_args(tp)[0])}s"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            dict: "a table"}.get(tp, str(tp))
