"""Other GPU hosts, reached over SSH: the inventory (``hosts.yaml``), the SSH transport, the remote ``watch --json``
stream, and a :class:`~tui.core.host.base.Host` whose facts come from the remote side.

Nothing here keeps a password or picks a host from anything but the inventory; keys, agents and ``~/.ssh/config``
stay the operator's own (OpenSSH's ``ssh`` reads them).
"""
