"""Interchangeable gradient transports for parameter-server training.

Every transport implements the contract in :mod:`transports.base` (a worker pushes one gradient
message per iteration to the parameter server, the server broadcasts parameters back, and every
received message carries a mask of what actually arrived). :mod:`transports.registry` names them
by slug (``tcp-cubic``, ``ltp``, ...) with the display name, colour and marker used in figures.
"""
