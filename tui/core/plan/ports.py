"""Where a plan binds unless told otherwise: the address, the endpoint, the servers of a disaggregated layout and
their NIXL side channels. Constants only, so that the command line's definitions read them at no cost."""

DEFAULT_HOST = "127.0.0.1"
#: the endpoint: the proxy of a disaggregated layout, or the single server
DEFAULT_PORT = 8000
#: the first server of a disaggregated layout; the next ones step by SERVER_PORT_STEP
SERVER_BASE_PORT = 8100
SERVER_PORT_STEP = 100
#: the first NIXL side-channel port; one per engine
SIDE_CHANNEL_BASE = 5600
#: data parallel across hosts: the head's RPC port the other hosts' engines reach (vLLM's default)
DP_RPC_PORT = 29550


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches (``localhost``, 127.0.0.0/8 in any spelling the OS reads,
    ``::1``): what binds safely by default; any other address is a warning (the servers, the proxy, ``disagg-tui
    web``). :func:`tui.core.netaddr.is_loopback`."""
    from tui.core import netaddr

    return netaddr.is_loopback(host)
