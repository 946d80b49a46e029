"""Field validators, one per message kind, built from the dataclasses' type
hints: a decoded header's fields are checked against them before a message is
made."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from .messages import KINDS, MAX_ITEMS, MAX_STR, WireError

_BASE = ("src", "seq", "t")


# --------------------------------------------------------------------------- validators


def _bad(where: str, what: str) -> WireError:
    return WireError(f"{where}: {what}")


def _v_int(v, where):
    if type(v) is not int:
        raise _bad(where, f"expected int, got {type(v).__name__}")
    return v


def _v_float(v, where):
    if type(v) is float:
        return v
    if type(v) is int:
        return float(v)
    raise _bad(where, f"expected float, got {type(v).__name__}")


def _v_str(v, where):
    if type(v) is not str:
        raise _bad(where, f"expected str, got {type(v).__name__}")
    if len(v) > MAX_STR:
        raise _bad(where, "string too long")
    return v


def _v_bool(v, where):
    if type(v) is not bool:
        raise _bad(where, f"expected bool, got {type(v).__name__}")
    return v


_SCALARS = {int: _v_int, float: _v_float, str: _v_str, bool: _v_bool}


def _make_validator(tp) -> typing.Callable[[Any, str], Any]:
    if tp in _SCALARS:
        return _SCALARS[tp]
    origin = typing.get_origin(tp)
    if origin is dict:
        kv, vv = (_make_validator(a) for a in typing.get_args(tp))

        def v_dict(v, where):
            if type(v) is not dict or len(v) > MAX_ITEMS:
                raise _bad(where, "expected a map")
            return {kv(k, where): vv(x, f"{where}.{k}") for k, x in v.items()}

        return v_dict
    if origin is list:
        (iv,) = (_make_validator(a) for a in typing.get_args(tp))

        def v_list(v, where):
            if type(v) is not list or len(v) > MAX_ITEMS:
                raise _bad(where, "expected a list")
            return [iv(x, f"{where}[{i}]") for i, x in enumerate(v)]

        return v_list
    if dataclasses.is_dataclass(tp):
        schema = _schema(tp)

        def v_struct(v, where):
            if type(v) is not dict:
                raise _bad(where, f"expected a map for {tp.__name__}")
            return tp(**_check_fields(schema, v, where))

        return v_struct
    raise TypeError(f"no wire validator for {tp}")  # pragma: no cover - import-time


def _schema(cls) -> dict[str, typing.Callable]:
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in _BASE or f.name == "arrays":
            continue
        out[f.name] = _make_validator(hints[f.name])
    return out


def _check_fields(schema: dict, raw: dict, where: str) -> dict:
    out = {}
    for k, x in raw.items():
        check = schema.get(k) if type(k) is str else None
        if check is None:
            raise _bad(where, f"unknown field {str(k)[:40]!r}")
        out[k] = check(x, f"{where}.{k}")
    return out


_SCHEMAS = {k: _schema(cls) for k, cls in KINDS.items()}
_HAS_ARRAYS = {k: any(f.name == "arrays" for f in dataclasses.fields(c)) for k, c in KINDS.items()}

