"""Running experiments: one sweep loop for every kind of run.

- :mod:`.engine`: the loop: a plan's unfinished runs, grouped by the network they share, each
  run's rows appended the moment it ends (resumable), progress, then the report;
- :mod:`.kinds`: what a kind of run supplies (its tables, network, one run's execution, its
  manifest and report) and the registry of kinds;
- :mod:`.ps`: PS training on the incast star, the kind the testbed was built for.

Peer-to-peer runs (:mod:`harness.p2p.run`) and simulations (:mod:`harness.simulation.driver`)
define their kinds next to their code; :mod:`harness.cluster` runs a plan's groups on a Ray
cluster through the same :func:`~.engine.run_group`.
"""
