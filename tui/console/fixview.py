"""A diagnosis's fix as the console shows it: what ``a`` (``up --apply-fix ENTRY``) will apply on these GPUs.

The layout follower matches a log without knowing the GPUs' architecture, so its diagnosis describes a fix whose
flags depend on it as "add --attention-backend TRITON_ATTN (on blackwell only)", and lists only the changes made
on every architecture ("set VLLM_USE_FLASHINFER_SAMPLER=0"), while ``up --apply-fix`` plans with the host's GPUs
and applies both on a B200. The console knows the GPUs (their NVML names): it describes the fix again from the
playbook entry for that architecture, so the text, the list of changes and what ``a`` applies agree. No Textual.
"""

from __future__ import annotations

from dataclasses import dataclass

from tui.console.state import ConsoleState
from tui.core.errors import printable
from tui.core.plan.gpuspecs import spec_for_name
from tui.core.playbook import Diagnosis, Playbook


@dataclass(frozen=True, slots=True)
class ShownFix:
    text: str  # one line: the changes and/or what to do instead
    changes: tuple[str, ...]  # what applying it changes in the plan ("set X=1", "add --flag v")


def gpu_arch(model: ConsoleState, server: str = "") -> str | None:
    """The architecture (``blackwell``, ``hopper`` …) of the GPUs ``server`` runs on (every GPU seen when it is
    not known), from their NVML names; None when they differ or a name is not one the datasheet knows."""
    view = model.servers.get(server)
    indices = view.gpus if view is not None and view.gpus else tuple(model.gpus)
    arches = set()
    for i in indices:
        g = model.gpus.get(i)
        spec = spec_for_name(g.sample.name) if g is not None and g.sample.name else None
        if spec is None:
            return None
        arches.add(spec.arch)
    return arches.pop() if len(arches) == 1 else None


def shown_fix(d: Diagnosis, book: Playbook | None, model: ConsoleState) -> ShownFix:
    """The fix of ``d`` for the GPUs its server runs on (as the diagnosis said it, where the entry or the GPUs are
    not known here: a replay of a recording, another host's playbook)."""
    entry = book.get(d.entry_id) if book is not None else None
    arch = gpu_arch(model, d.server)
    if entry is None or arch is None:
        return ShownFix(d.fix, d.changes)
    pf = entry.plan_fix(d.captures, arch)
    return ShownFix(printable(entry.fix_text(d.captures, arch)),
                    tuple(printable(c) for c in pf.describe()) if pf is not None else ())
