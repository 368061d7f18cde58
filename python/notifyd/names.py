"""Notification names and patterns (``protocol/PROTOCOL.md`` § 8, § 8.1): validation and matching.

The client checks names before sending them, so a bad name raises :class:`~notifyd.errors.InvalidName` at once
with the reason, instead of a round trip to the daemon.
"""

from __future__ import annotations

from typing import List, Sequence

from .errors import ErrorCode, InvalidName

MAX_NAME_LENGTH = 255
PROCESS_LOCAL_PREFIX = "self."

_ASCII_LABEL = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_:@+=")


def _is_invisible(scalar: int) -> bool:
    """The fixed list of invisible scalars above U+009F that names refuse (§ 8)."""
    return (
        scalar in (0x00A0, 0x00AD, 0x1680, 0x180E, 0x3000, 0xFEFF)
        or 0x2000 <= scalar <= 0x200F
        or 0x2028 <= scalar <= 0x202F
        or 0x205F <= scalar <= 0x206F
        or 0xFDD0 <= scalar <= 0xFDEF
        or 0xFFF0 <= scalar <= 0xFFFF
        or (scalar & 0xFFFE) == 0xFFFE
        or 0xE0000 <= scalar <= 0xE007F
    )


def _label_error(label: str) -> str:
    if not label:
        return "has an empty label (a leading or trailing '.', or '..')"
    for ch in label:
        if ch in _ASCII_LABEL:
            continue
        scalar = ord(ch)
        if scalar >= 0xA0 and not (0xD800 <= scalar <= 0xDFFF) and not _is_invisible(scalar):
            continue
        if ch in "*>":
            return f"has '{ch}' inside the label {label!r} (wildcards are whole labels, and only in patterns)"
        return f"contains the character U+{scalar:04X} ({ch!r}), which names do not allow"
    return ""


def _check(text: object, pattern: bool, max_length: int, allow_local: bool) -> None:
    what = "pattern" if pattern else "name"
    if not isinstance(text, str):
        raise InvalidName(f"a notification {what} must be a str, not {type(text).__name__}", ErrorCode.INVALID_NAME)
    if not text:
        raise InvalidName(f"invalid {what} '': it is empty", ErrorCode.INVALID_NAME)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidName(f"invalid {what} {text!r}: it contains a lone surrogate", ErrorCode.INVALID_NAME) from None
    if size > max_length:
        raise InvalidName(f"invalid {what} {text[:40]!r}...: {size} bytes, more than {max_length}",
                          ErrorCode.INVALID_NAME)
    labels = text.split(".")
    for index, label in enumerate(labels):
        if pattern and label == "*":
            continue
        if pattern and label == ">":
            if index != len(labels) - 1:
                raise InvalidName(f"invalid pattern {text!r}: '>' may only be the last label", ErrorCode.INVALID_NAME)
            continue
        problem = _label_error(label)
        if problem:
            raise InvalidName(f"invalid {what} {text!r}: it {problem}", ErrorCode.INVALID_NAME)
    if not allow_local and is_process_local(text):
        raise InvalidName(f"invalid {what} {text!r}: 'self.' names are process-local", ErrorCode.INVALID_NAME)


def validate_name(name: str, max_length: int = MAX_NAME_LENGTH, allow_local: bool = True) -> None:
    """Raises :class:`InvalidName` unless ``name`` is a valid name (§ 8; no wildcards).

    ``allow_local=False`` also refuses process-local ``self.`` names, which the daemon never accepts.
    """
    _check(name, False, max_length, allow_local)


def validate_pattern(pattern: str, max_length: int = MAX_NAME_LENGTH, allow_local: bool = True) -> None:
    """Raises :class:`InvalidName` unless ``pattern`` is a valid pattern (§ 8.1: ``*`` and a final ``>``)."""
    _check(pattern, True, max_length, allow_local)


def is_valid_name(name: str) -> bool:
    """Whether ``name`` is a valid name (process-local names included)."""
    try:
        validate_name(name)
    except InvalidName:
        return False
    return True


def is_valid_pattern(pattern: str) -> bool:
    """Whether ``pattern`` is a valid pattern (process-local patterns included)."""
    try:
        validate_pattern(pattern)
    except InvalidName:
        return False
    return True


def is_process_local(name: str) -> bool:
    """Whether ``name`` starts with ``self.``: delivered inside this process only, never sent to the daemon."""
    return name.startswith(PROCESS_LOCAL_PREFIX)


def is_pattern(pattern: str) -> bool:
    """Whether ``pattern`` has a wildcard label (``*`` or ``>``)."""
    return any(label in ("*", ">") for label in pattern.split("."))


def split_pattern(pattern: str) -> List[str]:
    """The labels of a pattern, for repeated :func:`matches_labels` calls."""
    return pattern.split(".")


def matches_labels(labels: Sequence[str], name: str) -> bool:
    """Whether ``name`` matches the pattern split into ``labels`` (§ 8.1, byte for byte)."""
    parts = name.split(".")
    if labels and labels[-1] == ">":
        if len(parts) < len(labels):
            return False
        count = len(labels) - 1
    else:
        if len(parts) != len(labels):
            return False
        count = len(labels)
    for i in range(count):
        if labels[i] != "*" and labels[i] != parts[i]:
            return False
    return True


def matches(pattern: str, name: str) -> bool:
    """Whether ``name`` matches ``pattern`` (§ 8.1): ``*`` is one label, a final ``>`` one or more."""
    return matches_labels(pattern.split("."), name)
