"""The report's list of packet captures: a line per run of the sweep that recorded one
(``invoke run-sweep --capture``, :mod:`harness.running.capture`).

Which runs have captures comes from the sweep's manifest, not from the run folders, which are
not committed: the list is the same on every checkout, and a capture named in it exists only on
the machine that ran the sweep. docs/reading-a-capture.md says how to open one.
"""

from __future__ import annotations

from pathlib import Path

from harness.reporting.tables import Sweep
from harness.running.capture import noted

FIGURES: tuple = ()


def _captured(sw: Sweep) -> dict[str, dict]:
    ids = set(sw.runs.run_id.astype(str))
    return {run_id: c for run_id, c in sorted(noted(sw.folder).items()) if run_id in ids}


def applies(sw: Sweep) -> bool:
    """Some run of the sweep recorded a capture."""
    return bool(_captured(sw))


def section(sw: Sweep) -> list[str]:
    """"Packet captures": a line per run with one, naming its files and their bounds."""
    captured = _captured(sw)
    if not captured:
        return []
    scheme = dict(zip(sw.runs.run_id.astype(str), sw.runs.scheme.astype(str)))
    lines = ["## Packet captures", "",
             "These runs recorded packets of the hosts named (`--capture`); the files "
             "stay in the run folders of the machine that ran the sweep (raw files are not "
             "committed). docs/reading-a-capture.md says how to read them.", ""]
    for run_id, c in captured.items():
        files = ", ".join(f"`runs/{run_id}/capture/{h}.pcap`" for h in c["hosts"])
        lines.append(f"- `{run_id}` ({scheme.get(run_id, '?')}): {files} (each packet cut to "
                     f"{c['snaplen_bytes']} bytes, at most {c['max_mb']:g} MB per host)")
    return lines + [""]


def draw(sw: Sweep, folder: Path, save) -> list[Path]:
    """No figures."""
    return []
