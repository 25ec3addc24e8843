"""The transport registry: slugs, drawing attributes, option handling."""

import re
import socket

import pytest

from transports import registry
from transports.base import OptionError


def test_tcp_variants_registered_with_distinct_looks():
    for slug in ("tcp-cubic", "tcp-reno", "tcp-bbr"):
        assert slug in registry.slugs()
    infos = list(registry.REGISTRY.values())
    assert len({i.color for i in infos}) == len(infos)
    assert all(re.fullmatch(r"#[0-9a-f]{6}", i.color) for i in infos)
    assert all(i.marker and i.display_name for i in infos)


def test_create_merges_fixed_options():
    assert registry.create("tcp-reno").options() == {"cc": "reno", "rto_min_ms": None}


def test_lowrto_sets_the_route_and_records_the_value():
    t = registry.create("tcp-cubic-lowrto")
    assert t.options()["rto_min_ms"] == 5
    assert t.host_commands("w1-eth0", "10.0.0.0/24") == [
        "ip route change 10.0.0.0/24 dev w1-eth0 rto_min 5ms"]
    assert registry.create("tcp-cubic").host_commands("w1-eth0", "10.0.0.0/24") == []
    with pytest.raises(OptionError, match="rto_min_ms"):
        registry.create("tcp-bbr", {"rto_min_ms": 0})


def test_ablations_are_ltp_with_fixed_thresholds():
    assert registry.create("ltp-reliable").options()["threshold_min"] == 1.0
    fixed = registry.create("ltp-fixed").options()
    assert (fixed["threshold_min"], fixed["threshold_max"], fixed["filler"]) == (0.95, 0.95, "zero")
    with pytest.raises(OptionError, match="cannot be changed"):
        registry.create("ltp-fixed", {"threshold_max": 0.9})


def test_unknown_slug_lists_the_known_ones():
    with pytest.raises(registry.UnknownTransport, match="choose one of: tcp-cubic"):
        registry.get("quic")


def test_fixed_option_cannot_be_overridden():
    with pytest.raises(OptionError, match="cannot be changed"):
        registry.create("tcp-bbr", {"cc": "cubic"})


def test_unknown_option_is_named():
    with pytest.raises(OptionError, match="no option 'window'"):
        registry.create("tcp-cubic", {"window": 3})


def test_duplicate_registration_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get("tcp-cubic"))


def _available_cc() -> set[str]:
    from pathlib import Path

    path = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
    return set(path.read_text().split()) if path.exists() else set()


@pytest.mark.parametrize("cc", ["cubic", "reno", "bbr"])
def test_congestion_control_is_read_back_per_socket(cc):
    from transports.tcp import _set_cc

    if cc not in _available_cc():
        pytest.skip(f"this kernel offers no {cc} (tcp_available_congestion_control)")
    with socket.socket() as s:
        assert _set_cc(s, cc) == cc


def test_plugins_load_on_first_lookup_not_on_import(tmp_path):
    import os
    import subprocess
    import sys

    plugin = tmp_path / "late.py"
    plugin.write_text(
        "from transports import registry\n"
        "registry.register(registry.TransportInfo('late-tcp', 'Late', '#000001', 'o',\n"
        "    'transports.tcp:TcpTransport', {'cc': 'reno'}, False, 'a plugin'))\n")
    code = ("import sys\n"
            "from transports import registry\n"
            "assert 'ltp_plugin_late' not in sys.modules, 'imported at import time'\n"
            "assert 'late-tcp' not in registry.REGISTRY\n"
            "assert registry.get('late-tcp').fixed_options == {'cc': 'reno'}\n"
            "assert 'late-tcp' in registry.slugs()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "LTP_TRANSPORTS": str(plugin)})
    assert proc.returncode == 0, proc.stderr


def test_option_rows_mark_what_the_slug_fixes():
    rows = {o.name: (value, fixed) for o, value, fixed in registry.get("tcp-cubic-lowrto").option_rows()}
    assert rows == {"cc": ("cubic", True), "rto_min_ms": (5, True)}
    rows = {o.name: (value, fixed) for o, value, fixed in registry.get("tcp-bbr").option_rows()}
    assert rows["rto_min_ms"] == (None, False)


def test_every_option_has_a_row_with_help():
    from transports.tcp import TcpTransport

    assert TcpTransport.DEFAULTS == {"cc": "cubic", "rto_min_ms": None}
    for o in TcpTransport.option_table():
        assert o.help and o.describe()
    with pytest.raises(OptionError, match="option cc must be one of cubic, reno, bbr"):
        TcpTransport("tcp-x", {"cc": "vegas"})


def test_a_plugin_with_only_defaults_still_works():
    from transports.base import Transport

    class Legacy(Transport):
        DEFAULTS = {"rate": 1.0}

        def serve(self, bind, workers, layout):
            raise NotImplementedError

        def connect(self, rank, bind, server, layout):
            raise NotImplementedError

    assert Legacy("legacy", {"rate": 2.0}).options() == {"rate": 2.0}
    assert [o.name for o in Legacy.option_table()] == ["rate"]
    with pytest.raises(OptionError, match="no option 'burst'"):
        Legacy("legacy", {"burst": 1})


def test_invoke_transports_lists_each_schemes_options():
    from transports import options_doc

    text = options_doc.schemes_text("tcp-cubic-lowrto")
    assert "rto_min_ms" in text and "5 ms" in text and "fixed" in text
