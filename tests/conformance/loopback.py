"""What the loopback conformance tests share: free ports on 127.0.0.1."""

import socket


def free_ports(n: int, kind: int = socket.SOCK_DGRAM) -> list[int]:
    """``n`` distinct ports that were free on 127.0.0.1 for sockets of ``kind`` a moment ago."""
    socks = [socket.socket(socket.AF_INET, kind) for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports
