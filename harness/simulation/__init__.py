"""Simulation at scale: the same native LTP core over a discrete-event network of thousands of
workers (``transports/native/sim``), no emulation and no root.

- :mod:`.kind`: the simulate kind of run (a grid of cells through the one sweep loop) and the
  simulator's cost as a benchmark;
- :mod:`.driver`: a simulated run's settings (:class:`~.driver.Cell`), the simulator's command
  line, one run;
- :mod:`.figures`: the scaling figures and the crossovers against the TCP model;
- :mod:`.validate`: the simulator held against the emulated testbed on the same pushes.

docs/simulation.md describes the model and its calibration.
"""
