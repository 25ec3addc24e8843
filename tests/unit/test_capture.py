"""Captures without root: the --capture options, tcpdump's command line, its bound, the pcap
reader, the manifest's record and the report's list, and refresh leaving --capture out."""

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from harness.running import capture as cap
from harness.running import engine, presets, refresh
from harness.running.capture import Capture, CaptureError, parse_capture, tcpdump_argv
from harness.running.runfiles import RunFiles

PROJECT = Path(__file__).resolve().parents[2]
INVOKE = [str(Path(sys.executable).parent / "invoke"), "-r", str(PROJECT)]


def test_parse_capture_gives_hosts_and_default_bounds():
    assert parse_capture(None) is None
    c = parse_capture("ps1, w1")
    assert c.hosts == ("ps1", "w1")
    assert (c.snaplen_bytes, c.max_mb) == (cap.DEFAULT_SNAPLEN_BYTES, cap.DEFAULT_MAX_MB)
    assert parse_capture("ps1", 256, 10).snaplen_bytes == 256


@pytest.mark.parametrize("args, words", [
    ((",",), "at least one host"),
    (("ps1,ps1",), "more than once"),
    (("ps1", 20), "--capture-snaplen must be from"),
    (("ps1", 128, 0), "--capture-mb must leave room"),
    ((None, 128), "name the hosts to capture"),
    ((None, None, 5.0), "name the hosts to capture"),
])
def test_bad_capture_settings_are_one_sentence(args, words):
    with pytest.raises(CaptureError, match=words):
        parse_capture(*args)


def test_the_bound_keeps_a_full_file_within_max_mb():
    c = Capture(("ps1",), snaplen_bytes=128, max_mb=1)
    full = cap.PCAP_FILE_HEADER_BYTES + c.max_packets * (128 + cap.PCAP_RECORD_HEADER_BYTES)
    assert full <= 1e6 < full + 128 + cap.PCAP_RECORD_HEADER_BYTES


def test_tcpdump_command_line(tmp_path):
    c = Capture(("ps1",), snaplen_bytes=96, max_mb=2)
    argv = tcpdump_argv("ps1-eth0", tmp_path / "ps1.pcap", c)
    assert argv[0] == "tcpdump"
    pairs = dict(zip(argv, argv[1:]))
    assert pairs["-i"] == "ps1-eth0" and pairs["-w"] == str(tmp_path / "ps1.pcap")
    assert pairs["-s"] == "96" and pairs["-c"] == str(c.max_packets)
    assert pairs["-Z"] == "root"
    assert {"-n", "-U", "--immediate-mode"} <= set(argv)


def test_run_files_own_the_capture_layout(tmp_path):
    files = RunFiles(tmp_path / "runs" / "r1")
    assert files.pcap("ps1") == tmp_path / "runs" / "r1" / "capture" / "ps1.pcap"
    assert files.capture_log("w1").parent == files.capture


def _pcap(frames, snaplen=64):
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1)
    for i, frame in enumerate(frames):
        cut = frame[:snaplen]
        out += struct.pack("<IIII", i, 0, len(cut), len(frame)) + cut
    return out


def test_pcap_reader_reads_records_and_drops_a_torn_last_one():
    data = _pcap([b"a" * 100, b"b" * 30])
    assert cap.pcap_records(data) == [(100, b"a" * 64), (30, b"b" * 30)]
    assert cap.pcap_records(data[:-5]) == [(100, b"a" * 64)]
    with pytest.raises(CaptureError, match="pcapng"):
        cap.pcap_records(b"\x0a\x0d\x0d\x0a" + bytes(40))


def test_the_manifest_notes_captures_and_forgets_a_run_redone_without_one(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"plan": {"name": "x"}}))
    cap.note(tmp_path, "r1", Capture(("ps1",)))
    cap.note(tmp_path, "r2", None)   # no capture, nothing recorded
    assert set(cap.noted(tmp_path)) == {"r1"}
    assert cap.noted(tmp_path)["r1"]["hosts"] == ["ps1"]
    cap.note(tmp_path, "r1", None)
    assert cap.noted(tmp_path) == {}
    assert json.loads((tmp_path / "manifest.json").read_text())["plan"] == {"name": "x"}
    cap.note(tmp_path / "nowhere", "r1", Capture(("ps1",)))   # no manifest: nothing happens


def test_the_report_lists_a_line_per_captured_run(tmp_path):
    import types

    import pandas as pd

    from harness.reporting.sections import captures

    (tmp_path / "manifest.json").write_text(json.dumps({"captures": {
        "r1": Capture(("ps1", "w1")).as_dict(), "gone": Capture(("ps1",)).as_dict()}}))
    sw = types.SimpleNamespace(folder=tmp_path, runs=pd.DataFrame(
        {"run_id": ["r1", "r2"], "scheme": ["ltp", "tcp-cubic"]}))
    lines = captures.section(sw)
    runs = [line for line in lines if line.startswith("- ")]
    assert runs == [runs[0]] and "`runs/r1/capture/ps1.pcap`" in runs[0]
    assert "`runs/r1/capture/w1.pcap`" in runs[0] and "(ltp)" in runs[0]
    sw.runs = sw.runs[sw.runs.run_id == "r2"]
    assert not captures.applies(sw)


def test_capture_hosts_are_checked_against_every_run():
    plan = presets.get("smoke").override(workers=(2,))
    engine.check_capture(plan, Capture(("ps1", "w2")))
    engine.check_capture(plan, None)
    with pytest.raises(CaptureError, match="--capture w3: run .* has no such host"):
        engine.check_capture(plan, Capture(("w3",)))


def test_a_capture_changes_no_run_id():
    # capturing is a sweep-level setting: the plan (and so every run id) does not know it
    plan = presets.get("smoke")
    assert "capture" not in json.dumps([s.as_dict() for s in plan.specs()])


def test_refresh_leaves_the_capture_out_of_recorded_commands():
    argv = refresh.again("run-sweep --preset smoke --capture ps1,w1 --capture-mb 5 --seeds 0",
                         "results/x", 0.01)
    assert "--capture" not in argv and "--capture-mb" not in argv and "ps1,w1" not in argv
    assert argv[:4] == ["run-sweep", "--preset", "smoke", "--seeds"]


@pytest.mark.parametrize("args, words", [
    (["--capture", "w9", "--workers", "2"], "--capture w9: run"),
    (["--capture-mb", "5"], "name the hosts to capture"),
    (["--capture", "ps1", "--capture-snaplen", "20"], "--capture-snaplen must be from"),
    (["--capture", "ps1", "--cluster", "auto"], "--capture runs on this machine only"),
])
def test_bad_capture_at_the_command_line_is_one_sentence(tmp_path, args, words):
    out = tmp_path / "sweep"
    proc = subprocess.run(INVOKE + ["run-sweep", "--preset", "smoke", "--out", str(out)] + args,
                          capture_output=True, text=True, cwd=PROJECT)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], proc.stderr
    assert not out.exists()


def test_a_peer_to_peer_capture_names_only_its_own_hosts(tmp_path):
    from harness.p2p import spec as p2p

    proc = subprocess.run(INVOKE + ["run-sweep", "--preset", sorted(p2p.PRESETS)[0], "--capture",
                                    "ps1", "--out", str(tmp_path / "p")],
                          capture_output=True, text=True, cwd=PROJECT)
    assert proc.returncode == 2 and "has no such host" in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "w1" in proc.stderr, proc.stderr
    assert not (tmp_path / "p" / "runs.csv").exists()
