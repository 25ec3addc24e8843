"""The SDN controller's apps and the harness's clients of them.

- :mod:`.controller_app`: the os-ken app that installs forwarding and emits port stats;
- :mod:`.mcast_app`: the os-ken app that measures links, selects multicast receivers
  (:mod:`.selmcast`, on the view of :mod:`.linkview`) and installs OpenFlow groups
  (:mod:`.mcast_plan`);
- :mod:`.control`: the command channel (take a host's link down and up);
- :mod:`.multicast`: the multicast app's client, and the sender.
"""
