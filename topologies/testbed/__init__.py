"""Bringing an emulated network up, measuring it, and always taking it down.

- :mod:`.network`: :class:`~.network.Testbed`, the lifecycle of a topology on this machine;
- :mod:`.ovs`: a private userspace Open vSwitch run from the project's state folder;
- :mod:`.process`: the one handle for processes started inside emulated hosts;
- :mod:`.ledger`: what a testbed created, on disk, so exactly that can be removed later;
- :mod:`.counters`: every counter of a run as a typed snapshot, and a run's figures;
- :mod:`.bottleneck`: the bottleneck's queue, the plain FIFO or a transport's priority bands.
"""
