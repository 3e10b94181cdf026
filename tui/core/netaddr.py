"""Addresses as the operating system reads them, not as they are spelled: one place that says whether a host text is
the wildcard (every interface: ``0.0.0.0``, ``::``), a loopback address, or a name.

A text check (``host in ("0.0.0.0", "::")``) misses what ``bind``, ``connect`` and ``getaddrinfo`` still read as
the wildcard: ``0``, ``00``, ``0x0``, ``0.0``, ``000.0.0.0`` (the BSD ``inet_aton`` forms glibc accepts), ``::0``,
``0:0::0``, ``[::]``, ``::ffff:0.0.0.0`` (IPv4-mapped), the empty text (``INADDR_ANY``). Connecting to any of them
reaches this machine, so an address another host is told to use (``--advertise``, an inventory ``address:``, a
remote plan's server URL, a bundle's peers) is never one; a bind on one is open to every network. Every such check
goes through :func:`is_wildcard`. Names are never resolved here (no DNS, no ``/etc/hosts``).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: the numeric IPv4 forms of ``inet_aton`` (1 to 4 parts, each decimal, octal ``0..`` or hex ``0x..``): what
#: glibc's ``getaddrinfo`` reads as an address before it would ask DNS
_LEGACY_V4 = re.compile(r"(?:0[xX][0-9A-Fa-f]*|[0-9]+)(?:\.(?:0[xX][0-9A-Fa-f]*|[0-9]+)){0,3}")
#: the longest host text looked at (a DNS name is at most 253 characters; an IPv6 with a zone a little more)
_MAX = 300


def parse_host(text: str) -> IPAddress | None:
    """The IP address ``text`` names as the OS reads it (``[::1]`` without its brackets, ``127.1`` and ``0x7f000001``
    as 127.0.0.1, ``0`` as 0.0.0.0), or None for a host name (or anything else that is no number)."""
    t = text.strip()
    if len(t) > _MAX:
        return None
    if t.startswith("[") and t.endswith("]"):
        t = t[1:-1]
    try:
        return ipaddress.ip_address(t)
    except ValueError:
        pass
    if _LEGACY_V4.fullmatch(t):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(t))
        except OSError:  # a part out of range (256, 08): no address, and getaddrinfo would not read it as one either
            return None
    return None


def _plain(addr: IPAddress) -> IPAddress:
    """An IPv4-mapped IPv6 address (``::ffff:a.b.c.d``) as the IPv4 address it carries; any other as it is."""
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def is_wildcard(host: str) -> bool:
    """True for every spelling of "all interfaces" (``0.0.0.0``, ``::``, ``0``, ``0x0``, ``::0``, ``[::]``,
    ``::ffff:0.0.0.0``, the empty text): an address to bind on, never one to give another host or to connect to."""
    if not host.strip():
        return True
    addr = parse_host(host)
    return addr is not None and _plain(addr).is_unspecified


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches: ``localhost``, 127.0.0.0/8 in any spelling (``127.1``,
    ``0x7f000001``), ``::1``, ``::ffff:127.0.0.1``. (Not ``*.localhost``: a name other than ``localhost`` is
    whatever the resolver says.)"""
    if host.strip().lower().rstrip(".") == "localhost":
        return True
    addr = parse_host(host)
    return addr is not None and _plain(addr).is_loopback


def connect_host(host: str) -> str:
    """Where a client of a server bound on ``host`` connects: this machine's loopback for a wildcard (``::1`` for an
    IPv6 spelling, 127.0.0.1 otherwise), ``host`` itself for any other."""
    if is_wildcard(host):
        addr = parse_host(host) if host.strip() else None
        return "::1" if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is None else "127.0.0.1"
    return host


def url_host(url: str) -> str | None:
    """The host of a URL (``http://[::]:8000`` → ``::``), None when it has none or does not parse."""
    try:
        return urlsplit(url.strip()).hostname
    except ValueError:
        return None


def wildcard_why(host: str) -> str:
    """The words for a refused wildcard (``'0' is the wildcard address 0.0.0.0``), for one-line errors."""
    addr = parse_host(host)
    shown = host.strip()[:60]
    if addr is None or str(_plain(addr)) == shown:
        return f"{shown or 'the empty address'} is the wildcard address (every interface)"
    return f"{shown!r} is the wildcard address {_plain(addr)} (every interface)"
