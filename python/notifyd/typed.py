"""Typed payloads (``protocol/PROTOCOL.md`` § 12): dataclasses as the JSON the Swift library's ``NotifyMessage`` uses.

``encode(value)`` writes one JSON object in UTF-8 with sorted keys and no white space: dates (timezone-aware
``datetime``) as RFC 3339 UTC strings with a ``Z`` and the fraction of a second only when there is one, ``bytes``
as Base64 with padding, ``None`` fields left out. ``decode(cls, payload)`` reads it back into the dataclass
``cls`` (using its type hints), accepting fractions of any length and numeric offsets; a payload that does not
fit raises :class:`TypedPayloadError`, never anything else::

    @dataclasses.dataclass
    class BatteryLevel:
        percent: int
        charging: bool

    center.post("org.example.power.battery", typed.encode(BatteryLevel(42, False)))
    level = typed.decode(BatteryLevel, notification.payload)
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import json
import re
import sys
import types
from typing import Any, Dict, List, Mapping, Optional, Tuple, Type, TypeVar, Union, get_args, get_origin, get_type_hints

from .errors import NotifydError

T = TypeVar("T")
_UnionType: Any = getattr(types, "UnionType", None)  # `int | None` (Python 3.10+)

_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))\Z")


class TypedPayloadError(NotifydError, ValueError):
    """A value cannot be encoded as a typed payload, or a payload does not decode as the expected type."""


def format_date(value: datetime.datetime) -> str:
    """``value`` (timezone-aware) in UTC as ``2027-01-15T08:00:00Z``, or with a fraction such as ``...00.25Z``."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise TypedPayloadError(f"cannot encode the naive datetime {value!r}: give it a timezone (e.g. UTC)")
    utc = value.astimezone(datetime.timezone.utc)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if len(text) != 19:  # strftime pads years below 1000 inconsistently across platforms
        text = f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"
    if utc.microsecond:
        text += "." + f"{utc.microsecond:06d}".rstrip("0")
    return text + "Z"


def parse_date(text: str) -> datetime.datetime:
    """An RFC 3339 date as § 12 writes it (``Z`` or a numeric offset, a fraction of any length), in UTC.

    Digits beyond microseconds are dropped (Python's precision).
    """
    found = _DATE.match(text)
    if not found:
        raise TypedPayloadError(f"{text!r} is not an RFC 3339 date such as 2027-01-15T08:00:00Z")
    year, month, day, hour, minute, second = (int(found.group(i)) for i in range(1, 7))
    fraction = found.group(7) or ""
    micro = int((fraction + "000000")[:6])
    if found.group(8):
        zone = datetime.timezone.utc
    else:
        sign = 1 if found.group(9) == "+" else -1
        zone = datetime.timezone(sign * datetime.timedelta(hours=int(found.group(10)), minutes=int(found.group(11))))
    try:
        value = datetime.datetime(year, month, day, hour, minute, second, micro, tzinfo=zone)
        return value.astimezone(datetime.timezone.utc)
    except (ValueError, OverflowError) as error:
        raise TypedPayloadError(f"{text!r} is not a date in the years 0001 to 9999: {error}") from None


def _to_json(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, datetime.datetime):
        return format_date(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_json(getattr(value, f.name), f"{where}.{f.name}")
                for f in dataclasses.fields(value) if getattr(value, f.name) is not None}
    if isinstance(value, Mapping):
        out: Dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypedPayloadError(f"{where}: object keys must be str, not {type(key).__name__}")
            if item is not None:
                out[key] = _to_json(item, f"{where}.{key}")
        return out
    if isinstance(value, (list, tuple)):
        return [_to_json(item, f"{where}[{i}]") for i, item in enumerate(value)]
    raise TypedPayloadError(f"{where}: cannot encode a {type(value).__name__} in a typed payload")


def encode(value: Any) -> bytes:
    """The § 12 payload of ``value``: a dataclass instance or a mapping with str keys."""
    if not (dataclasses.is_dataclass(value) and not isinstance(value, type)) and not isinstance(value, Mapping):
        raise TypedPayloadError(f"a typed payload is a dataclass instance or a mapping, not {type(value).__name__}")
    document = _to_json(value, type(value).__name__)
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def _from_json(tp: Any, value: Any, where: str) -> Any:
    origin = get_origin(tp)
    args: Tuple[Any, ...] = get_args(tp)
    if tp is Any:
        return value
    if origin is Union or (_UnionType is not None and origin is _UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in args:
            if option is type(None):
                continue
            try:
                return _from_json(option, value, where)
            except TypedPayloadError as error:
                errors.append(str(error))
        raise TypedPayloadError("; ".join(errors) or f"{where}: no type matches")
    if origin is list:
        if not isinstance(value, list):
            raise TypedPayloadError(f"{where}: expected an array, found {type(value).__name__}")
        return [_from_json(args[0] if args else Any, item, f"{where}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise TypedPayloadError(f"{where}: expected an object, found {type(value).__name__}")
        return {k: _from_json(args[1] if len(args) > 1 else Any, v, f"{where}.{k}") for k, v in value.items()}
    if tp is datetime.datetime:
        if not isinstance(value, str):
            raise TypedPayloadError(f"{where}: expected a date string, found {type(value).__name__}")
        return parse_date(value)
    if tp is bytes:
        if not isinstance(value, str):
            raise TypedPayloadError(f"{where}: expected Base64 text, found {type(value).__name__}")
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise TypedPayloadError(f"{where}: {value[:40]!r} is not Base64") from None
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _decode_dataclass(tp, value, where)
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise TypedPayloadError(f"{where}: expected a number, found {type(value).__name__}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise TypedPayloadError(f"{where}: expected an integer, found {json.dumps(value)[:40]}")
    if tp in (bool, str):
        if type(value) is tp:
            return value
        raise TypedPayloadError(f"{where}: expected {tp.__name__}, found {type(value).__name__}")
    raise TypedPayloadError(f"{where}: cannot decode into {tp!r}")


def _decode_dataclass(cls: Type[T], value: Any, where: str) -> T:
    if not isinstance(value, dict):
        raise TypedPayloadError(f"{where}: expected a JSON object, found {type(value).__name__}")
    module = sys.modules.get(cls.__module__)
    try:
        hints = get_type_hints(cls, vars(module) if module is not None else None)
    except Exception as error:  # e.g. `int | None` on Python 3.9
        raise TypedPayloadError(f"cannot read the type hints of {cls.__name__}: {error}") from None
    kwargs: Dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not field.init:
            continue
        if field.name in value:
            kwargs[field.name] = _from_json(hints.get(field.name, Any), value[field.name], f"{where}.{field.name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            hint = hints.get(field.name)
            if type(None) in get_args(hint):
                kwargs[field.name] = None
            else:
                raise TypedPayloadError(f"{where}: the key {field.name!r} is missing")
    return cls(**kwargs)


def decode(cls: Type[T], payload: Union[bytes, str]) -> T:
    """The dataclass ``cls`` read from a § 12 payload; raises :class:`TypedPayloadError` if it does not fit."""
    if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
        raise TypeError(f"decode() needs a dataclass type, not {cls!r}")
    try:
        document = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as error:
        raise TypedPayloadError(f"the payload is not JSON: {error}") from None
    return _decode_dataclass(cls, document, cls.__name__)


_ = Optional  # re-exported name used in type hints of callers' dataclasses
