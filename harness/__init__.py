"""The experiment harness: run specs, the process on each emulated host, sweeps, results, figures.

- :mod:`harness.spec`: :class:`~harness.spec.RunSpec`, one run's every parameter (frozen).
- :mod:`harness.models`, :mod:`harness.datasets`: small registries of models and data sets.
- :mod:`harness.node`: the entry point that runs as the PS or as a worker inside a host.
- :mod:`harness.runner`: one run on a live testbed: start, wait with a timeout, collect, record.
- :mod:`harness.sweep`: many runs, resumable, into one results folder.
- :mod:`harness.results`: the tidy tables' schemas and append-only writers.
"""
