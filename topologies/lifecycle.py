"""What brings a part of the network up and always takes it down again (the testbed, its cross
traffic): one context-manager shape, so that a failure halfway up leaves nothing behind."""

from __future__ import annotations


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
