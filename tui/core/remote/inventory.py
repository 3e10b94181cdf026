"""The inventory of other hosts: ``hosts.yaml`` in the config dir, strict YAML.

::

    ssh_config: ~/.ssh/disagg-config    # optional: an OpenSSH client config for these hosts (ssh -F)
    hosts:
      gpu-a:                            # the name used everywhere else (letters, digits, - and _)
        ssh: gpu-a                      # a ~/.ssh/config alias, or user@host
      gpu-b:
        ssh: ops@10.0.0.12
        address: 10.0.0.12              # what the other hosts reach it at (layouts across hosts); default: the
                                        # ssh destination's host when it is an IP address
        port: 2222                      # optional
        jump: ops@bastion.example:22    # optional: ssh -J
        disagg_tui: /opt/disagg-tui/.venv/bin/disagg-tui   # default: disagg-tui on the remote PATH
        vllm: /opt/vllm/.venv/bin/vllm  # default: vllm on the remote PATH
        gpus: [0, 1, 2, 3]              # default: every GPU it has
        sim: false                      # true: a simulated host (every remote command gets --sim)

The file is from outside: a regular file of at most 1 MiB (``yamlio.load_file``), unknown keys and wrong types are
one-line errors naming file, line and field, every string is bounded, and nothing is expanded (no ``$VAR``, no
``~`` in a remote path: a remote path is absolute or a command name on the remote PATH). A ``password`` key is
refused: SSH keys and the agent are the way in.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.core import netaddr, paths, yamlio
from tui.core.errors import InputError

FILE_NAME = "hosts.yaml"
#: hosts one inventory may name
MAX_HOSTS = 64
#: characters of a path or a destination
MAX_PATH = 1024
#: words of a remote ``disagg_tui`` command (``[/usr/bin/python3, -m, tui]``)
MAX_ARGV = 8
#: GPUs of one host (the most one NVLink domain holds)
MAX_GPUS = 72

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
# user@host or an alias: no leading '-' (it would be an ssh option), no spaces, quotes, '$' or shell words
_DEST = re.compile(r"(?:[A-Za-z0-9._][A-Za-z0-9._+-]{0,63}@)?(?:[A-Za-z0-9_][A-Za-z0-9._-]{0,252}|\[[0-9A-Fa-f:.]+\])")
_JUMP = re.compile(_DEST.pattern + r"(?::[0-9]{1,5})?")
_ADDRESS = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
_SECRET_KEYS = ("password", "passwd", "passphrase", "secret")


@dataclass(frozen=True, slots=True)
class HostEntry:
    """One host of the inventory."""

    name: str
    ssh: str  # the destination: an alias or user@host
    port: int | None = None
    jump: str | None = None
    disagg_tui: tuple[str, ...] = ("disagg-tui",)
    vllm: str = "vllm"
    gpus: tuple[int, ...] | None = None  # None: every GPU
    sim: bool = False
    address: str | None = None  # the address other hosts reach it at (None: the destination's, if an IP)

    def routable_address(self) -> str:
        """The address a layout across hosts binds and advertises on this host: ``address:``, else the SSH
        destination's host when it is an IP address (InputError naming the field otherwise)."""
        if self.address:
            return self.address
        host = self.ssh.rsplit("@", 1)[-1].strip("[]")
        try:
            ipaddress.ip_address(host)
            if netaddr.is_wildcard(host):
                raise ValueError(host)
        except ValueError:
            raise InputError(f"{self.name}: no address for a layout across hosts (its ssh destination {host!r} is "
                             "an alias or the wildcard)", field=f"hosts.{self.name}.address",
                             hint="add 'address: IP' (the address the other hosts reach it at) to hosts.yaml") from None
        return host

    def remote_cli(self, *args: str) -> list[str]:
        """The remote argv of a ``disagg-tui`` command on this host (``--sim`` added for a simulated one)."""
        sim = ["--sim"] if self.sim else []
        return [*self.disagg_tui, *args, *sim]


@dataclass(frozen=True, slots=True)
class Inventory:
    hosts: tuple[HostEntry, ...]
    ssh_config: Path | None = None
    source: Path | None = None

    def get(self, name: str) -> HostEntry:
        for h in self.hosts:
            if h.name == name:
                return h
        known = ", ".join(h.name for h in self.hosts) or "none"
        where = self.source or FILE_NAME
        raise InputError(f"no host {name!r} in {where} (hosts: {known})", field="NAME",
                         hint="add it under 'hosts:' in that file")

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]


def default_path() -> Path:
    return paths.config_dir() / FILE_NAME


def _refuse_secrets(f: yamlio.Fields) -> None:
    for key in f.data:
        if str(key).lower() in _SECRET_KEYS:
            raise f.error(str(key), "hosts.yaml never holds a password or passphrase: remove it, and let SSH "
                                    "keys do it (ssh-add, or IdentityFile in ~/.ssh/config)",
                          ) from None


def _text(f: yamlio.Fields, key: str, value: str, *, what: str) -> str:
    if not value or len(value) > MAX_PATH:
        raise f.error(key, f"{what} must be 1 to {MAX_PATH} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise f.error(key, f"{what} holds a control character")
    if "$" in value or "`" in value:
        raise f.error(key, f"{what} holds '$' or '`': nothing in hosts.yaml is expanded; write the value out")
    return value


def _remote_path(f: yamlio.Fields, key: str, value: str) -> str:
    value = _text(f, key, value, what="a remote path")
    if value.startswith("~"):
        raise f.error(key, "'~' is not expanded on the remote side; give an absolute path or a command name on "
                           "the remote PATH")
    if value.startswith("-"):
        raise f.error(key, "a remote path cannot start with '-'")
    if "/" in value and not value.startswith("/"):
        raise f.error(key, "a remote path is absolute (/opt/...) or a command name on the remote PATH")
    return value


def _entry(name: str, data: Any, source: Path, line: int | None) -> HostEntry:
    if not _NAME.fullmatch(name):
        raise InputError("a host name is 1-32 letters, digits, '-' or '_' (starting with a letter or digit)",
                         file=source, line=line, field=f"hosts.{name[:40]}")
    f = yamlio.Fields(data, source, prefix=f"hosts.{name}.", line=line)
    _refuse_secrets(f)
    dest = _text(f, "ssh", f.require("ssh", str), what="an SSH destination")
    if not _DEST.fullmatch(dest):
        raise f.error("ssh", f"not an SSH destination (user@host or a ~/.ssh/config alias): {dest[:80]!r}")
    port = f.integer("port", lo=1, hi=65535)
    jump = f.get("jump", str)
    if jump is not None:
        jump = _text(f, "jump", jump, what="a jump host")
        if not _JUMP.fullmatch(jump):
            raise f.error("jump", f"not a jump host (user@host[:port] or an alias): {jump[:80]!r}")
    cli_raw = f.get("disagg_tui", (str, list))
    if cli_raw is None:
        cli: tuple[str, ...] = ("disagg-tui",)
    elif isinstance(cli_raw, str):
        cli = (_remote_path(f, "disagg_tui", cli_raw),)
    else:
        words = f.str_list("disagg_tui")
        if not 1 <= len(words) <= MAX_ARGV:
            raise f.error("disagg_tui", f"a command of 1 to {MAX_ARGV} words")
        cli = (_remote_path(f, "disagg_tui", words[0]),
               *(_text(f, "disagg_tui", w, what="a word of the command") for w in words[1:]))
    vllm = _remote_path(f, "vllm", f.get("vllm", str, "vllm"))
    gpus_raw = f.get("gpus", list)
    gpus: tuple[int, ...] | None = None
    if gpus_raw is not None:
        out: list[int] = []
        for i, g in enumerate(gpus_raw):
            if isinstance(g, bool) or not isinstance(g, int) or not 0 <= g < MAX_GPUS:
                item_line = gpus_raw.line_of(i) if isinstance(gpus_raw, yamlio.LList) else f.line_of("gpus")
                raise InputError(f"item {i + 1} must be a GPU index 0-{MAX_GPUS - 1}; got {str(g)[:40]!r}",
                                 file=source, line=item_line, field=f.name("gpus"))
            if g in out:
                raise f.error("gpus", f"GPU {g} is listed twice")
            out.append(g)
        if not out:
            raise f.error("gpus", "an empty list; leave the key out to use every GPU")
        gpus = tuple(out)
    sim = bool(f.get("sim", bool, False))
    address = f.get("address", str)
    if address is not None:
        address = _text(f, "address", address, what="an address").strip()
        try:
            ipaddress.ip_address(address)
        except ValueError:
            if not _ADDRESS.fullmatch(address):
                raise f.error("address", f"not an IP address or a host name: {address[:80]!r}") from None
        if netaddr.is_wildcard(address):
            raise f.error("address", f"{netaddr.wildcard_why(address)}: give the address the other hosts reach "
                                     "this one at")
    f.done()
    return HostEntry(name=name, ssh=dest, port=port, jump=jump, disagg_tui=cli, vllm=vllm, gpus=gpus, sim=sim,
                     address=address)


def parse(data: Any, source: Path) -> Inventory:
    if data is None:
        return Inventory(hosts=(), source=source)
    top = yamlio.Fields(data, source)
    _refuse_secrets(top)
    ssh_config: Path | None = None
    cfg = top.get("ssh_config", str)
    if cfg is not None:
        cfg = _text(top, "ssh_config", cfg, what="a path")
        # '~' alone is the operator's home here (ssh itself reads ~/.ssh/config the same way); nothing else expands
        p = Path(cfg).expanduser() if cfg.startswith("~/") else Path(cfg)
        if not p.is_absolute():
            raise top.error("ssh_config", "an absolute path (or ~/...)")
        ssh_config = p
    raw = top.get("hosts", dict, None)
    hosts: list[HostEntry] = []
    if raw is not None:
        if len(raw) > MAX_HOSTS:
            raise top.error("hosts", f"more than {MAX_HOSTS} hosts ({len(raw)})")
        for name, value in raw.items():
            line = raw.line_of(name) if isinstance(raw, yamlio.LDict) else top.line_of("hosts")
            hosts.append(_entry(str(name), value, source, line))
    top.done()
    return Inventory(hosts=tuple(hosts), ssh_config=ssh_config, source=source)


def load(path: Path | None = None) -> Inventory:
    """The inventory (``hosts.yaml`` in the config dir); none there is an empty inventory."""
    path = path or default_path()
    if not path.exists() and not path.is_symlink():
        return Inventory(hosts=(), source=path)
    return parse(yamlio.load_file(path, "profile"), path)
