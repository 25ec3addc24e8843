"""A testbed removes everything it created and restores what it changed."""

from topologies.incast import IncastParams
from topologies.testbed.ledger import read_sysctl
from topologies.testbed.network import OVS_SOCKET_BUFFERS, Testbed


def test_nothing_is_left_after_a_testbed(tmp_path, clean_machine):
    # The machine's value before may already equal ours (another tool, or a run killed with -9 that
    # `invoke clean` has not yet restored), so judge "raised" against our target, not the old
    # value.
    wmem = read_sysctl("net.core.wmem_default")
    with Testbed(IncastParams(n_workers=1), tmp_path) as tb:
        assert read_sysctl("net.core.wmem_default") == OVS_SOCKET_BUFFERS["net.core.wmem_default"]
        tb.host_run("w1", "ping", "-c", "1", "-W", "2", "10.0.0.254")
    assert read_sysctl("net.core.wmem_default") == wmem
