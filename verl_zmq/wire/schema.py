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


Validator = typing.Callable[[Any, str], Any]


def _bad(where: str, what: str) -> WireError:
    return WireError(f"{where}: {what}")


def _v_int(v: Any, where: str) -> int:
    if type(v) is not int:
        raise _bad(where, f"expected int, got {type(v).__name__}")
    return v


def _v_float(v: Any, where: str) -> float:
    if type(v) is float:
        return v
    if type(v) is int:
        return float(v)
    raise _bad(where, f"expected float, got {type(v).__name__}")


def _v_str(v: Any, where: str) -> str:
    if type(v) is not str:
        raise _bad(where, f"expected str, got {type(v).__name__}")
    if len(v) > MAX_STR:
        raise _bad(where, "string too long")
    return v


def _v_bool(v: Any, where: str) -> bool:
    if type(v) is not bool:
        raise _bad(where, f"expected bool, got {type(v).__name__}")
    return v


_SCALARS: dict[Any, Validator] = {int: _v_int, float: _v_float, str: _v_str, bool: _v_bool}


def _make_validator(tp: Any) -> Validator:
    if tp in _SCALARS:
        return _SCALARS[tp]
    origin = typing.get_origin(tp)
    if origin is dict:
        kv, vv = (_make_validator(a) for a in typing.get_args(tp))

        def v_dict(v: Any, where: str) -> dict[Any, Any]:
            if type(v) is not dict or len(v) > MAX_ITEMS:
                raise _bad(where, "expected a map")
            return {kv(k, where): vv(x, f"{where}.{k}") for k, x in v.items()}

        return v_dict
    if origin is list:
        (iv,) = (_make_validator(a) for a in typing.get_args(tp))

        def v_list(v: Any, where: str) -> list[Any]:
            if type(v) is not list or len(v) > MAX_ITEMS:
                raise _bad(where, "expected a list")
            return [iv(x, f"{where}[{i}]") for i, x in enumerate(v)]

        return v_list
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        schema = _schema(tp)
        struct: Any = tp

        def v_struct(v: Any, where: str) -> Any:
            if type(v) is not dict:
                raise _bad(where, f"expected a map for {struct.__name__}")
            return struct(**_check_fields(schema, v, where))

        return v_struct
    raise TypeError(f"no wire validator for {tp}")  # pragma: no cover - import-time


def _schema(cls: Any) -> dict[str, Validator]:
    hints = typing.get_type_hints(cls)
    out: dict[str, Validator] = {}
    for f in dataclasses.fields(cls):
        if f.name in _BASE or f.name == "arrays":
            continue
        out[f.name] = _make_validator(hints[f.name])
    return out


def _check_fields(schema: dict[str, Validator], raw: dict[str, Any],
                  where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, x in raw.items():
        check = schema.get(k) if type(k) is str else None
        if check is None:
            raise _bad(where, f"unknown field {str(k)[:40]!r}")
        out[k] = check(x, f"{where}.{k}")
    return out


_SCHEMAS = {k: _schema(cls) for k, cls in KINDS.items()}
_HAS_ARRAYS = {k: any(f.name == "arrays" for f in dataclasses.fields(c)) for k, c in KINDS.items()}

