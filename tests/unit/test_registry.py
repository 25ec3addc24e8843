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
    assert registry.create("tcp-reno").options() == {"cc": "reno"}


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


@pytest.mark.parametrize("cc", ["cubic", "reno", "bbr"])
def test_congestion_control_is_read_back_per_socket(cc):
    from transports.tcp import _set_cc

    with socket.socket() as s:
        assert _set_cc(s, cc) == cc
