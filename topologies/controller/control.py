"""The harness's side of the controller's command channel: take a host's link down and up again.

The os-ken app (:mod:`topologies.controller.controller_app`) listens on 127.0.0.1 for JSON
commands, one per line. :class:`ControllerClient` sends one and returns the answer, or raises
:class:`ControlError` with the controller's sentence. A cut is made in the switch by the controller
(the host's forwarding rule removed, a drop rule for its port added), so the failure is in the
network: the host keeps running and its interface stays up, as with a failed link or switch port
further away. The controller records when it sent each change (its events file), and
:meth:`ControllerClient.cut` returns that time. The controller answers once the switch has
confirmed the change (a barrier); ``settle``, when given, then waits until the switch's datapath
forwards by it too (Open vSwitch revalidates its cached flows asynchronously), so a packet sent
after :meth:`~ControllerClient.cut` or :meth:`~ControllerClient.restore` returns meets the new
rules.
"""

from __future__ import annotations

import json
import socket
from typing import Callable


class ControlError(RuntimeError):
    """The controller refused a command or could not be reached."""


class ControllerClient:
    """Commands to one running controller app."""

    def __init__(self, port: int, timeout_s: float = 5.0,
                 settle: Callable[[], None] | None = None) -> None:
        self.port = port
        self.timeout_s = timeout_s
        self.settle = settle

    def _change(self, op: str, host: str) -> float:
        t = float(self.command(op, host=host)["t"])
        if self.settle is not None:
            self.settle()
        return t

    def command(self, op: str, **args) -> dict:
        """Send ``{"op": op, **args}`` and return the controller's answer."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), self.timeout_s) as s:
                s.sendall((json.dumps({"op": op, **args}) + "\n").encode())
                line = s.makefile("rb").readline()
        except OSError as exc:
            raise ControlError(f"the controller's command channel did not answer ({exc}).") \
                from None
        reply = json.loads(line) if line else {"ok": False, "error": "no answer"}
        if not reply.pop("ok", False):
            raise ControlError(f"the controller refused {op}: {reply.get('error')}")
        return reply

    def cut(self, host: str) -> float:
        """Take ``host``'s link down in the switch; return when the controller did (wall clock)."""
        return self._change("cut", host)

    def restore(self, host: str) -> float:
        """Put ``host``'s link back; return when the controller did (wall clock)."""
        return self._change("restore", host)
