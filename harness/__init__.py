"""The experiment harness: what runs on the emulated hosts, the sweeps that run it, and what they
publish. One sub-package per concern:

- :mod:`harness.training`: models, data sets, aggregation rules, Byzantine behaviours and the
  robust rules against them, compression (the numerics of a run, no network).
- :mod:`harness.hosts`: the processes on the emulated hosts: the PS or a worker
  (:mod:`~harness.hosts.node`), the PS's loop and sync modes, injected faults, the fork server.
- :mod:`harness.running`: specs and named plans, one run on a live testbed (``runner``), its raw
  files and tidy tables, provenance and the code fingerprint, and the one sweep loop every kind
  of run goes through (``engine``, ``kinds``; locally or on a Ray cluster).
- :mod:`harness.p2p`, :mod:`harness.simulation`: the other kinds of run: peer-to-peer training on
  the fabric, and the discrete-event simulator of the native core.
- :mod:`harness.reporting`: tables loaded, statistics, figures, reports, everything published.
- :mod:`harness.bench`: benchmarks that print figures (never timed tests).
- :mod:`harness.cli`: the command line's user errors, signals and number lists.
"""
