"""What brings a part of the network up and always takes it down again (the testbed, its cross
traffic): one context-manager shape, so that a failure halfway up leaves nothing behind; and the
wait for a helper process (a delay line, a capture) to say it is ready."""

from __future__ import annotations

import time
from collections.abc import Callable


class UpDown:
    """A context manager that brings something up (:meth:`_up`) and always takes it down
    (:meth:`_down`), also when bringing it up failed halfway: :meth:`_down` must cope with
    whatever part of :meth:`_up` ran."""

    def _up(self) -> None:
        raise NotImplementedError

    def _down(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            self._up()
        except BaseException:
            self._down()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._down()


def wait_ready(proc, ready: Callable[[], bool], deadline: float, poll_s: float,
               exited: Callable[[], Exception], late: Callable[[], Exception]) -> None:
    """Wait until ``ready()`` (a helper's log shows it listening): raise ``exited()`` if ``proc``
    ends first, ``late()`` once ``time.monotonic()`` passes ``deadline``."""
    while not ready():
        if proc.poll() is not None:
            raise exited()
        if time.monotonic() > deadline:
            raise late()
        time.sleep(poll_s)
