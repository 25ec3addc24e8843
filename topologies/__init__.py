"""Emulated networks: Mininet topologies, the project's own Open vSwitch, the SDN controller.

- :mod:`topologies.incast`: the 8-worker / 1-parameter-server star (pure data, a Mininet ``Topo``).
- :mod:`topologies.ovs`: a private userspace Open vSwitch run from the project's state folder.
- :mod:`topologies.controller_app`: the os-ken app that installs forwarding and emits port stats.
- :mod:`topologies.impair`: random loss at each receiving host's ingress (nftables).
- :mod:`topologies.network`: the lifecycle: a context manager that brings all of it up and always
  takes down exactly what it created.
"""
