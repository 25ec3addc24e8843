"""Benchmarks that print figures (never timed tests).

- :mod:`.run`: the emulated network against its settings, and the transports on the incast;
- :mod:`.node`: the process of a transport benchmark on each emulated host;
- :mod:`.loopback`: push goodput and CPU per byte over 127.0.0.1.
"""
