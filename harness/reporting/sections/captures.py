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


def _captured(folder: Path, run_ids) -> dict[str, dict]:
    ids = set(run_ids)
    return {run_id: c for run_id, c in sorted(noted(folder).items()) if run_id in ids}


def applies(sw: Sweep) -> bool:
    """Some run of the sweep recorded a capture."""
    return bool(_captured(sw.folder, sw.runs.run_id.astype(str)))


def section(sw: Sweep) -> list[str]:
    """"Packet captures": a line per run with one, naming its files and their bounds."""
    return lines(sw.folder, dict(zip(sw.runs.run_id.astype(str), sw.runs.scheme.astype(str))))


def lines(folder: Path, labels: dict[str, str]) -> list[str]:
    """The section for the runs ``labels`` names (run id -> what the line calls the run, e.g.
    its scheme) that recorded a capture; nothing if none did."""
    captured = _captured(folder, labels)
    if not captured:
        return []
    out = ["## Packet captures", "",
           "These runs recorded packets of the hosts named (`--capture`); the files "
           "stay in the run folders of the machine that ran the sweep (raw files are not "
           "committed). docs/reading-a-capture.md says how to read them.", ""]
    for run_id, c in captured.items():
        files = ", ".join(f"`runs/{run_id}/capture/{h}.pcap`" for h in c["hosts"])
        out.append(f"- `{run_id}` ({labels.get(run_id, '?')}): {files} (each packet cut to "
                   f"{c['snaplen_bytes']} bytes, at most {c['max_mb']:g} MB per host)")
    return out + [""]


def draw(sw: Sweep, folder: Path, save) -> list[Path]:
    """No figures."""
    return []
