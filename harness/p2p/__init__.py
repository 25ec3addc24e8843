"""Peer-to-peer training with selective multicast (issue 15): no PS, the controller chooses who
each worker sends its parameters to.

- :mod:`harness.p2p.spec`: one run's parameters (:class:`~harness.p2p.spec.PeerSpec`) and the
  ``p2p`` presets;
- :mod:`harness.p2p.coord`: the round coordinator in the root namespace: the BSP barrier or the SSP
  staleness bound, and each round's receivers from the controller
  (:mod:`topologies.controller.mcast_app`);
- :mod:`harness.p2p.peer`: one peer, a process in an emulated host: trains on its shard, sends
  its parameters to its receivers (:mod:`transports.peer`), mixes what it received;
- :mod:`harness.p2p.run`: one run on the fabric and a sweep of them into ``runs.csv``;
- :mod:`harness.p2p.report`: the tables, the figures and the report.

``docs/p2p.md`` describes the mode and what is our interpretation.
"""
