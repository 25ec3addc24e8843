"""The processes on the emulated hosts.

- :mod:`.node`: the entry point that runs as the PS or as one worker inside a host;
- :mod:`.ps`: the PS's loop: synchronisation modes and who it counts on;
- :mod:`.sync`: the synchronisation modes as text (``bsp``, ``ssp:S``, ``async``);
- :mod:`.faults`: the faults the harness injects (kill, link, straggler) as text and as actions;
- :mod:`.zygote`: the fork server that starts host processes with torch already imported.
"""
