"""Emulated networks: Mininet topologies, the project's own Open vSwitch, the SDN controller.

- :mod:`topologies.incast`: the N-worker / 1-parameter-server star, with optional cross-traffic
  hosts (pure data, a Mininet ``Topo``), and every host and interface name.
- :mod:`topologies.fabric`: the leaf-spine fabric of workers (heterogeneous access links, shared
  oversubscribed uplinks, optional cross hosts per leaf) for peer-to-peer multicast.
- :mod:`topologies.ovs`: a private userspace Open vSwitch run from the project's state folder.
- :mod:`topologies.controller_app`: the os-ken app that installs forwarding and emits port stats.
- :mod:`topologies.mcast_app`: the os-ken app that measures links, selects multicast receivers
  (:mod:`topologies.selmcast`, on the view of :mod:`topologies.linkview`) and installs OpenFlow
  groups (:mod:`topologies.mcast_plan`); :mod:`topologies.multicast` is its client and sender.
- :mod:`topologies.impair`: what a host's ingress does to packets (``Impairment``): uniform loss
  (nftables) or Gilbert-Elliott loss, per packet or in time (the eBPF program in
  ``topologies/geloss/``), and delay.
- :mod:`topologies.delay`: the delay line (an NFQUEUE helper per host, ``topologies/delay/``).
- :mod:`topologies.counters`: every counter of a run as a typed snapshot, and a run's figures.
- :mod:`topologies.cross`: background traffic through the bottleneck (:mod:`topologies.onoff`
  is its UDP generator).
- :mod:`topologies.process`: the one handle for processes started inside emulated hosts.
- :mod:`topologies.network`: the lifecycle: a context manager that brings all of it up and always
  takes down exactly what it created.
"""
