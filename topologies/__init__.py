"""Emulated networks: the topologies as data, and the machinery that brings them up and impairs them.

- :mod:`topologies.incast`: the N-worker / 1-parameter-server star, with optional cross-traffic
  hosts (pure data, a Mininet ``Topo``), and every host and interface name.
- :mod:`topologies.fabric`: the leaf-spine fabric of workers (heterogeneous access links, shared
  oversubscribed uplinks, optional cross hosts per leaf) for peer-to-peer multicast.
- :mod:`topologies.lifecycle`: the one up-and-always-down shape of what the testbed starts
  (the network, its cross traffic).
- :mod:`topologies.testbed`: bringing a network up and always taking down exactly what it created
  (:class:`~topologies.testbed.network.Testbed`), the private userspace Open vSwitch, host
  processes, the ledger of what was created, and the counters a run is measured by.
- :mod:`topologies.impair`: what a host's ingress does to packets: uniform or Gilbert-Elliott loss
  (nftables, or the eBPF program in ``topologies/impair/geloss/``), the delay line (an NFQUEUE
  helper, ``topologies/impair/delay/``), and background cross traffic.
- :mod:`topologies.controller`: the os-ken apps (forwarding and port stats; multicast: link
  measurement, receiver selection, OpenFlow groups) and the harness's clients of them.
"""
