"""Running experiments: from a spec to its rows, one sweep loop for every kind of run.

- :mod:`.spec`: :class:`~.spec.RunSpec`, one PS run's every parameter (frozen, validated);
- :mod:`.presets`: the named plans (a spec and the dimensions a sweep crosses);
- :mod:`.engine`: the loop: a plan's unfinished runs, grouped by the network they share, each
  run's rows appended the moment it ends (resumable), progress, then the report;
- :mod:`.kinds`: what a kind of run supplies (its tables, network, one run's execution, its
  manifest and report) and the registry of kinds; :mod:`.ps`: the PS kind, on the incast star;
- :mod:`.runner`: one PS run on a live testbed: start, wait with a timeout, collect, record;
- :mod:`.runfiles`: a run folder's raw files, written by the hosts; :mod:`.metrics`: from them
  to the run's rows;
- :mod:`.results`: every table's columns with units, and the one append-only writer;
- :mod:`.provenance`, :mod:`.fingerprint`: the machine, the code and the other load of each run;
- :mod:`.cluster`: a plan's groups on a Ray cluster, through the same :func:`~.engine.run_group`.

Peer-to-peer runs (:mod:`harness.p2p.run`) and simulations (:mod:`harness.simulation.driver`)
define their kinds next to their code.
"""
