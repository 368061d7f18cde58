"""Where the daemon's socket is, and whether to trust the daemon behind it: the Swift library's rules.

``protocol/PROTOCOL.md`` § 1 and ``README.md`` (Where the socket lives; ``Sources/NotifyWire/SocketLocation.swift``
and ``NotifyCenter.DaemonUser`` in ``Sources/Notify/NotifyCenter+Configuration.swift``).
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from typing import Mapping, Optional, Tuple

SOCKET_ENVIRONMENT_VARIABLE = "NOTIFYD_SOCKET"
DAEMON_UID_ENVIRONMENT_VARIABLE = "NOTIFYD_DAEMON_UID"
SYSTEM_SOCKET_PATH = "/run/notifyd/notifyd.sock"


def default_socket_path(uid: Optional[int] = None, environment: Optional[Mapping[str, str]] = None) -> str:
    """The socket a client uses when not told otherwise, first match wins (§ 1).

    ``$NOTIFYD_SOCKET`` if set and not empty; ``/run/notifyd/notifyd.sock`` for uid 0;
    ``$XDG_RUNTIME_DIR/notifyd/notifyd.sock`` if that is set and not empty; else ``/tmp/notifyd-UID/notifyd.sock``.
    """
    env = os.environ if environment is None else environment
    uid = os.getuid() if uid is None else uid
    explicit = env.get(SOCKET_ENVIRONMENT_VARIABLE, "")
    if explicit:
        return explicit
    if uid == 0:
        return SYSTEM_SOCKET_PATH
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime:
        return runtime + "/notifyd/notifyd.sock"
    return f"/tmp/notifyd-{uid}/notifyd.sock"


class DaemonUser:
    """Which user may run the daemon a center talks to, checked with ``SO_PEERCRED`` on every connection.

    A daemon running as this process's own user or as root is always trusted. ``DaemonUser.same_user_or_root()``
    trusts nobody else; ``DaemonUser.uid(n)`` also trusts uid ``n``; ``DaemonUser.any_user()`` trusts every user.
    The default, :meth:`from_environment`, reads ``$NOTIFYD_DAEMON_UID`` (a uid, or ``any``), as the Swift library.
    """

    __slots__ = ("_trusted", "_any")

    def __init__(self, trusted: Optional[int] = None, any_user: bool = False) -> None:
        """Prefer the named constructors; ``trusted`` is one more trusted uid, ``any_user`` trusts all."""
        self._trusted = trusted
        self._any = any_user

    @classmethod
    def same_user_or_root(cls) -> "DaemonUser":
        """Only a daemon running as this process's user or as root."""
        return cls()

    @classmethod
    def uid(cls, uid: int) -> "DaemonUser":
        """This process's user, root, or ``uid`` (e.g. a daemon in a container that runs as its own user)."""
        return cls(trusted=uid)

    @classmethod
    def any_user(cls) -> "DaemonUser":
        """Any user: for sockets whose location alone is trusted."""
        return cls(any_user=True)

    @classmethod
    def from_environment(cls, environment: Optional[Mapping[str, str]] = None) -> "DaemonUser":
        """``$NOTIFYD_DAEMON_UID``: ``any``, a decimal uid, else (unset or not a uid) same user or root."""
        env = os.environ if environment is None else environment
        text = env.get(DAEMON_UID_ENVIRONMENT_VARIABLE)
        if text == "any":
            return cls.any_user()
        if text is not None and text.isascii() and text.isdigit() and int(text) <= 0xFFFFFFFF:
            return cls.uid(int(text))
        return cls.same_user_or_root()

    def allows(self, daemon_uid: int, own_uid: int) -> bool:
        """Whether a daemon running as ``daemon_uid`` may serve a process running as ``own_uid``."""
        if daemon_uid == own_uid or daemon_uid == 0 or self._any:
            return True
        return self._trusted is not None and daemon_uid == self._trusted

    def __repr__(self) -> str:
        if self._any:
            return "DaemonUser.any_user()"
        if self._trusted is not None:
            return f"DaemonUser.uid({self._trusted})"
        return "DaemonUser.same_user_or_root()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DaemonUser) and (self._trusted, self._any) == (other._trusted, other._any)

    def __hash__(self) -> int:
        return hash((self._trusted, self._any))


def is_root_only_directory(socket_path: str) -> bool:
    """Whether the directory holding ``socket_path`` belongs to root and no one else may write to it.

    Then only root (or a service manager running as root, like ``notifyd.socket`` making ``/run/notifyd``) can
    have put a socket there, and the daemon's own user does not matter (the system daemon runs as a dynamic user).
    """
    index = socket_path.rfind("/")
    directory = "." if index < 0 else (socket_path[:index] or "/")
    try:
        info = os.stat(directory)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode):
        return False
    return info.st_uid == 0 and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) == 0


def peer_credentials(sock: socket.socket) -> Tuple[int, int, int]:
    """``(pid, uid, gid)`` of the process at the other end of a connected Unix socket (``SO_PEERCRED``)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("iII"))
    pid, uid, gid = struct.unpack("iII", raw)
    return pid, uid, gid
