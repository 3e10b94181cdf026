"""Who started a layout, who uses it now, and what it was started with: the owner and the launch request the state
file records, read for the front ends.

A layout is started by ``up`` from the CLI, by a console (which starts ``up`` detached) or by a campaign
(``disagg-tui run``); the state file keeps which, with its process (pid and start time: a recycled pid is never
taken for it) and the time (:class:`~tui.core.launch.state.LayoutOwner`). A benchmark registers itself as a user
of the layout while it runs (:func:`using`). A layout is *held* while the campaign that started it still runs or a
benchmark still runs against it: a benchmark, a stop, a restart or a relaunch of a held layout is refused with the
holder named (:func:`check_free`, :class:`LayoutInUse`), unless the operator says to go on (``--force``; the
console asks first). Every front end asks here; none decides for itself who holds a layout.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from tui.core import typedread
from tui.core.errors import InputError, LayoutBusy
from tui.core.launch.state import MAX_USERS, LayoutOwner, LayoutRecord, LayoutUser, StateStore
from tui.core.launch.supervisor import create_time, process_alive
from tui.core.plan.request import LaunchRequest
from tui.core.redact import REDACTED, restore_env

#: the flag that takes a held layout anyway, the same on every command that refuses one (up, down, bench)
FORCE_FLAG = "--force"


def user_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def owner(kind: str, *, name: str = "", pid: int | None = None) -> LayoutOwner:
    """The owner record of a layout started now by ``kind`` (``cli``, ``console``, ``campaign``) in the process
    ``pid`` (this one by default)."""
    who = os.getpid() if pid is None else pid
    if not 0 < who <= typedread.PID_MAX:
        raise InputError(f"not a process id: {who}", field="--owner-pid")
    return LayoutOwner(kind=kind, pid=who, create_time=create_time(who), since=time.time(), name=name,
                       user=user_name())


def owner_alive(o: LayoutOwner) -> bool:
    return o.pid > 0 and process_alive(o.pid, o.create_time)


def _clock(at: float, now: float | None = None) -> str:
    """``19:54``, or ``May 02 19:54`` when it was not within the last 20 hours."""
    if not at:
        return ""
    now = time.time() if now is None else now
    fmt = "%H:%M" if abs(now - at) < 20 * 3600 else "%b %d %H:%M"
    return time.strftime(fmt, time.localtime(at))


def owner_words(o: LayoutOwner) -> str:
    """``campaign dp2-sweep``, ``the console``, ```disagg-tui up` from the CLI``."""
    if o.kind == "campaign":
        return f"campaign {o.name}" if o.name else "a campaign"
    if o.kind == "console":
        return "the console"
    if o.kind == "cli":
        return "`disagg-tui up` from the CLI"
    return o.kind


def started_by_text(rec: LayoutRecord, *, alive: bool | None = None, now: float | None = None) -> str:
    """``started by campaign X (pid 4242) at 19:54``; ``(pid 4242, ended)`` once the campaign has ended, ``(pid 4242,
    closed)`` once the console has (``alive``: known already, else looked up; ``up`` from the CLI ends once the
    layout is up: nothing said); an older record without an owner says who launched it, if it knows."""
    o = rec.started_by
    if o is None:
        if rec.owner_pid:
            return f"launched by pid {rec.owner_pid} (who started it was not recorded)"
        return ""
    ended = {"campaign": ", ended", "console": ", closed"}.get(o.kind, "")
    if ended and (owner_alive(o) if alive is None else alive):
        ended = ""
    pid = f" (pid {o.pid}{ended})" if o.pid else ""
    at = _clock(o.since or rec.created, now)
    return f"started by {owner_words(o)}{pid}" + (f" at {at}" if at else "")


def started_by_dict(rec: LayoutRecord) -> dict[str, object] | None:
    """The owner as ``status --json`` gives it."""
    o = rec.started_by
    if o is None:
        return None
    return {"kind": o.kind, "name": o.name, "pid": o.pid, "alive": owner_alive(o), "since": o.since or rec.created,
            "user": o.user, "text": started_by_text(rec)}


@dataclass(frozen=True, slots=True)
class Holder:
    """A process that holds a layout now: the campaign that started it (still running), or a benchmark running
    against it. ``text`` names it: ``campaign X (pid 4242), which benchmarks it``."""

    kind: str  # campaign | bench
    pid: int
    text: str


def holders(rec: LayoutRecord, *, me: Sequence[int] = (), now: float | None = None) -> list[Holder]:
    """Who holds ``rec`` now (their processes alive), ``me`` (pids: the caller's own) left out. Blocking (one
    psutil look per process)."""
    out: list[Holder] = []
    o = rec.started_by
    if o is not None and o.kind == "campaign" and o.pid not in me and owner_alive(o):
        out.append(Holder("campaign", o.pid, f"{owner_words(o)} (pid {o.pid}), which benchmarks it"))
    for u in rec.users:
        if u.pid in me or not process_alive(u.pid, u.create_time):
            continue
        at = _clock(u.since, now)
        what = f", {u.what}" if u.what else ""
        out.append(Holder(u.kind, u.pid, f"a benchmark (pid {u.pid}{what})" + (f" since {at}" if at else "")))
    return out


def held_text(found: Sequence[Holder]) -> str:
    """``campaign X (pid 4242), which benchmarks it; a benchmark (pid 77, decode-heavy, runs/console)``."""
    return "; ".join(h.text for h in found)


class LayoutInUse(LayoutBusy):
    """A held layout: what the operator asked for (a benchmark, a stop, a restart) would act under its holder.
    Exit 2; the hint names the flag that goes on anyway."""

    def __init__(self, rec: LayoutRecord, found: Sequence[Holder], action: str) -> None:
        self.record = rec
        self.holders = tuple(found)
        self.action = action
        super().__init__(f"{rec.topology} of {rec.profile_id} (layout {rec.id}) is in use by {held_text(found)}",
                         hint=f"wait until it is done, or give {FORCE_FLAG} to {action} anyway")


def check_free(rec: LayoutRecord, action: str, *, force: bool = False, me: Sequence[int] = ()) -> list[Holder]:
    """Who holds ``rec``; :class:`LayoutInUse` naming them when someone does and ``force`` is not given. ``action``
    says what would be done (``stop it``, ``benchmark it``, ``replace it``). Blocking."""
    found = holders(rec, me=me)
    if found and not force:
        raise LayoutInUse(rec, found, action)
    return found


@contextlib.contextmanager
def using(store: StateStore, layout_id: str, *, what: str = "", kind: str = "bench") -> Iterator[None]:
    """This process registered as a user of the layout (a benchmark against it) for the block; gone after it (and
    a user whose process has died is dropped when the next one registers)."""
    pid = os.getpid()
    me = LayoutUser(kind=kind, pid=pid, create_time=create_time(pid), since=time.time(), what=what[:200])
    with store.locked() as layouts:
        rec = layouts.get(layout_id)
        if rec is not None:
            rec.users = [u for u in rec.users if u.pid != pid and process_alive(u.pid, u.create_time)]
            rec.users = [*rec.users[-(MAX_USERS - 1):], me]
    try:
        yield
    finally:
        with contextlib.suppress(Exception), store.locked() as layouts:
            rec = layouts.get(layout_id)
            if rec is not None:
                rec.users = [u for u in rec.users if u.pid != pid]


def stored_request(rec: LayoutRecord, environ: Mapping[str, str] | None = None) -> LaunchRequest | None:
    """The request ``rec`` was started with, ready to launch again: read back with the request's parser, its
    redacted environment values taken from ``environ`` (this process's by default: secrets are never stored).
    None when none was recorded; an InputError naming what is missing (a secret not set here, a secret in an
    extra argument) or what does not parse."""
    request = rec.launch_request()
    if request is None:
        return None
    if any(REDACTED in a for a in request.extra_args):
        raise InputError(f"the stored request of layout {rec.id} has a secret in its extra vllm arguments, and "
                         "secrets are never stored", field="--arg",
                         hint="launch it again from the launch screen (l) or with up, giving the argument")
    env = dict(request.extra_env)
    if any(REDACTED in v for v in env.values()):
        restored = restore_env(env, os.environ if environ is None else environ,
                               what=f"the stored request of layout {rec.id}")
        request = replace(request, extra_env=tuple((k, restored[k]) for k, _ in request.extra_env))
    return request


def request_to_store(request: LaunchRequest, applied: Sequence[str] = ()) -> list[str]:
    """What the state file keeps of the request a layout was started with: its ``up`` arguments without
    ``--replace`` (a restart decides that), the fixes applied to it as ``--apply-fix`` (``applied``: entry ids, in
    order; ``auto`` stays when none was needed)."""
    fix = ",".join(applied) if applied else request.apply_fix
    return replace(request, replace=False, apply_fix=fix).to_argv()


def fix_ids(request: LaunchRequest | None) -> list[str]:
    """The playbook fixes a request asks for by name (``--apply-fix A,B``; not ``auto``)."""
    if request is None or not request.apply_fix or request.apply_fix == "auto":
        return []
    return [i for i in request.apply_fix.split(",") if i]


def with_fix(request: LaunchRequest, entry_id: str) -> LaunchRequest:
    """``request`` with one more playbook fix asked for by name (the ones it carries kept)."""
    ids = fix_ids(request)
    return replace(request, apply_fix=",".join([*ids, entry_id] if entry_id not in ids else ids))


__all__ = ["FORCE_FLAG", "Holder", "LayoutInUse", "check_free", "fix_ids", "held_text", "holders", "owner",
           "owner_alive", "owner_words", "request_to_store", "started_by_dict", "started_by_text", "stored_request",
           "user_name", "using", "with_fix"]
