"""The drop-in validator's HTTP server as a burst of clients meets it."""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from tests.support.processes import Processes

# The kernel caps every listen queue at net.core.somaxconn (4,096 since Linux 5.4; 128 before)
SOMAXCONN = int(Path("/proc/sys/net/core/somaxconn").read_text())
BURST = min(200, SOMAXCONN)


def test_a_burst_of_connections_waits_in_the_listen_queue_while_the_node_is_busy(
    processes: Processes,
) -> None:
    """A node too busy to accept (here: stopped) must hold a burst of new connections in its
    listen queue, as agave's RPC does (1,024 deep), not drop them: socketserver's default
    queue of 5 made the kernel drop all but 6 of these, and a loaded machine saw clients
    reset or answered after seconds of SYN retries."""
    url = processes.start(
        "drop-in",
        [sys.executable, "-m", "svcpay.localnet.server", "--rpc-port", "0"],
        "svcpay-localnet ready ",
    )
    child = processes.children[-1]
    address = (urlsplit(url).hostname or "", urlsplit(url).port or 0)
    sockets = [socket.socket() for _ in range(BURST)]
    os.kill(child.pid, signal.SIGSTOP)
    try:
        for s in sockets:
            s.setblocking(False)
            s.connect_ex(address)  # EINPROGRESS: the handshake completes in the kernel
        connected, waiting = 0, list(sockets)
        deadline = time.monotonic() + 2.0  # a dropped SYN is first sent again after 1 s
        while waiting and time.monotonic() < deadline:
            _, writable, _ = select.select([], waiting, [], 0.1)
            for s in writable:
                connected += s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                waiting.remove(s)
    finally:
        os.kill(child.pid, signal.SIGCONT)
        for s in sockets:
            s.close()
    assert connected == BURST, f"{connected} of {BURST} connections were held for the node"
    # ...and the node, going on, answers.
    health = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "getHealth"}, timeout=30)
    assert health.json()["result"] == "ok"
