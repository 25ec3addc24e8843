"""What the network does to packets besides carrying them.

- :mod:`.loss`: loss at each host's ingress: uniform (nftables) or Gilbert-Elliott, per packet or
  in time (the eBPF program in ``geloss/``), as text and as rules;
- :mod:`.delay`: the delay line (an NFQUEUE helper per host, ``delay/``);
- :mod:`.cross`: background traffic through the bottleneck; :mod:`.onoff` is its UDP generator.
"""
