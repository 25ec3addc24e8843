"""Random loss at each host's ingress, inside the host's own network namespace (nftables).

There is no netem on this kernel, and dropping on the switch side does nothing with userspace
Open vSwitch, so loss is applied where a packet is received: a ``netdev`` table hooked on the
host interface's ingress drops each IPv4 packet independently with probability ``loss_pct / 100``
(``numgen random``, resolution 1e-6). Named counters record every IPv4 packet that arrived and
every packet dropped, so the measured loss comes from counters, not from the configuration.
The same rules work unchanged on kernels that do have netem.
"""

from __future__ import annotations

import json

TABLE = "ltp_impair"
RESOLUTION = 1_000_000


def ruleset(intf: str, loss_pct: float) -> str:
    """An nft script that (re)creates the impairment table for ``intf`` atomically."""
    threshold = round(loss_pct / 100 * RESOLUTION)
    drop = (f'        meta protocol ip numgen random mod {RESOLUTION} < {threshold} '
            f'counter name "dropped" drop\n') if threshold > 0 else ""
    # "add; delete; add" is nft's idiom for replacing a table in one transaction.
    return (
        f"table netdev {TABLE}\n"
        f"delete table netdev {TABLE}\n"
        f"table netdev {TABLE} {{\n"
        f'    counter arrived {{ }}\n'
        f'    counter dropped {{ }}\n'
        f"    chain ingress {{\n"
        f'        type filter hook ingress device "{intf}" priority -500; policy accept;\n'
        f'        meta protocol ip counter name "arrived"\n'
        f"{drop}"
        f"    }}\n"
        f"}}\n"
    )


def parse_counters(nft_json: str) -> dict[str, int]:
    """``{"arrived": packets, "dropped": packets}`` from ``nft -j list counters table ...``."""
    out = {"arrived": 0, "dropped": 0}
    for item in json.loads(nft_json)["nftables"]:
        counter = item.get("counter")
        if counter and counter.get("table") == TABLE and counter["name"] in out:
            out[counter["name"]] = int(counter["packets"])
    return out
