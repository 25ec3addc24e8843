"""The text forms of a sweep's settings (cross traffic, faults, Byzantine workers): every good
text parses to its value, whose canonical text reads back to itself; every bad one raises
its module's error in one sentence that says what is wrong."""

import pytest

from harness.hosts.faults import Fault, FaultError, parse_fault
from harness.training.byzantine import Attack, ByzantineError, parse_byzantine
from topologies.impair.cross import CrossError, CrossSpec, OnOffUdp, TcpFlows, parse_cross

GOOD = [
    *[(parse_cross, text, value) for text, value in [
        ("none", CrossSpec()),
        (None, CrossSpec()),
        ("tcp:2", CrossSpec((TcpFlows(2),))),
        ("tcp:1:cc=bbr", CrossSpec((TcpFlows(1, "bbr"),))),
        ("udp:1:rate=50,on=50ms,off=150ms", CrossSpec((OnOffUdp(1, 50, 50, 150),))),
        ("udp:2:rate=30:on=0.02s:off=80", CrossSpec((OnOffUdp(2, 30, 20, 80),))),
        ("tcp:2+udp:1:rate=10,dist=exp,size=200",
         CrossSpec((TcpFlows(2), OnOffUdp(1, 10, 50, 150, 200, "exp"))))]],
    *[(parse_fault, text, value) for text, value in [
        ("none", Fault()),
        ("kill@20", Fault("kill", 20)),
        ("kill@20:w3", Fault("kill", 20, worker=2)),
        ("restart@5:1.5s", Fault("restart", 5, 1.5)),
        ("stall@20:2s", Fault("stall", 20, 2.0)),
        ("link@20:2s:w1", Fault("link", 20, 2.0, worker=0)),
        ("straggler:3x", Fault("straggler", factor=3.0)),
        ("STRAGGLER:1.5x:w2", Fault("straggler", factor=1.5, worker=1))]],
    *[(parse_byzantine, text, value) for text, value in [
        ("0", Attack()), ("2:sign-flip", Attack(2, "sign-flip")),
        ("2:SIGN-FLIP:4", Attack(2, "sign-flip", 4.0)),   # 4 is sign-flip's default
        ("2:sign-flip:1", Attack(2, "sign-flip", 1.0)), ("1:scaled:-3", Attack(1, "scaled", -3.0)),
        ("3:alie", Attack(3, "alie")), ("1:ipm:0.1", Attack(1, "ipm", 0.1)),
        ("1:gaussian:2", Attack(1, "gaussian", 2.0)), ("1:random", Attack(1, "random"))]],
]

BAD = [
    *[(parse_cross, CrossError, text, words) for text, words in [
        ("tcp", "whole number"), ("tcp:0", "whole number"), ("udp:x", "whole number"),
        ("quic:1", "not a cross-traffic kind"), ("tcp:1+", "not a cross-traffic kind"),
        ("udp:1:rate=0", "rate must be above 0"), ("udp:1:rate=fast", "rate must be above 0"),
        ("udp:1:on=5min", "duration"), ("udp:1:off=0", "above 0"),
        ("udp:1:size=9000", "size"), ("udp:1:dist=pareto", "dist"),
        ("udp:1:rate", "name=value"), ("udp:1:on=1ms,on=2ms", "twice"),
        ("tcp:1:rate=5", "tcp takes cc"), ("tcp:1:cc=dctcp", "cc must be one of")]],
    *[(parse_fault, FaultError, text, words) for text, words in [
        ("explode@3", "is not a fault"), ("kill", "say after which iteration"),
        ("kill@3:2s", "takes no duration"), ("stall@3", "needs a duration"),
        ("stall@3:0s", "needs a duration"), ("link@3:5x", "needs a duration"),
        ("straggler:0.5x", "slow-down F of at least 1"), ("straggler@3:2x", "slow-down"),
        ("none:w2", "takes no arguments"), ("kill@3:w0", "numbered from w1")]],
    *[(parse_byzantine, ByzantineError, text, words) for text, words in [
        ("2:foo", "unknown Byzantine behaviour"), ("2", "names no behaviour"),
        ("two:sign-flip", "not a Byzantine setting"), ("0:sign-flip", "write 0 alone"),
        ("1:gaussian:0", "above 0")]],
]


@pytest.mark.parametrize("parse, text, value", GOOD)
def test_texts_parse_and_read_back(parse, text, value):
    assert parse(text) == value
    canonical = value.text()
    assert parse(canonical).text() == canonical


@pytest.mark.parametrize("parse, error, text, words", BAD)
def test_bad_texts_are_one_sentence(parse, error, text, words):
    with pytest.raises(error, match=words) as info:
        parse(text)
    assert str(info.value).endswith(".")
