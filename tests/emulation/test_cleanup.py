"""A testbed removes everything it created and restores what it changed."""

from topologies.incast import IncastParams
from topologies.ledger import read_sysctl
from topologies.network import Testbed


def test_nothing_is_left_after_a_testbed(tmp_path, clean_machine):
    wmem = read_sysctl("net.core.wmem_default")
    with Testbed(IncastParams(n_workers=1), tmp_path) as tb:
        assert read_sysctl("net.core.wmem_default") != wmem
        tb.host_run("w1", "ping", "-c", "1", "-W", "2", "10.0.0.254")
    assert read_sysctl("net.core.wmem_default") == wmem
