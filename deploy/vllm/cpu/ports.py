"""Loopback ports for the servers: picking a free one, and telling who listens on one."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def listening_sockets(port: int) -> set[str]:
    """``socket:[inode]`` names of the sockets listening on ``port`` (IPv4 or IPv6)."""
    sockets: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                fields = row.split()
                # fields: sl, local "ADDR:PORT" (hex), remote, state (0A = LISTEN), ..., inode
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    sockets.add(f"socket:[{fields[9]}]")
    return sockets


def group_listens_on(pgid: int, port: int) -> bool:
    """Whether a process of group ``pgid`` holds a socket listening on ``port``."""
    sockets = listening_sockets(port)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.getpgid(int(proc.name)) != pgid:
                continue
            if any(os.readlink(fd) in sockets for fd in (proc / "fd").iterdir()):
                return True
    return False
