"""The experiment harness: run specs, the process on each emulated host, sweeps, results, reports.

- :mod:`harness.spec`: :class:`~harness.spec.RunSpec`, one run's every parameter (frozen).
- :mod:`harness.models`, :mod:`harness.datasets`: small registries of models and data sets.
- :mod:`harness.node`: the entry point that runs as the PS or as a worker inside a host.
- :mod:`harness.runner`: one run on a live testbed: start, wait with a timeout, collect, record.
- :mod:`harness.running`: the one sweep loop, for every kind of run, into one results folder.
- :mod:`harness.results`: the tidy tables' schemas and append-only writers.
- :mod:`harness.reporting`: tables loaded, statistics, figures, reports, everything published.
- :mod:`harness.simulation`, :mod:`harness.p2p`: simulated runs, peer-to-peer training.
"""
