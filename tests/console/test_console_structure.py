"""The console's structure: no import circle anywhere in ``tui`` (type-checking imports included), and screens
that never reach into the app (they get the state and context as attributes and post messages)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]


def _circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for m in sorted(graph.modules):
            if m not in index:
                visit(m)
    finally:
        sys.setrecursionlimit(limit)
    return out


def test_no_import_circle_in_tui_type_checking_imports_included() -> None:
    graph = grimp.build_graph("tui", exclude_type_checking_imports=False)
    assert "tui.console.app" in graph.modules
    assert _circles(graph) == []


def test_the_circle_finder_finds_a_circle() -> None:
    graph = grimp.ImportGraph()
    for m in ("a", "b", "c"):
        graph.add_module(m)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="a")
    graph.add_import(importer="b", imported="c")
    assert _circles(graph) == [["a", "b"]]


def test_no_screen_reaches_into_the_app() -> None:
    """No screen or widget holds the app as a ``ConsoleApp`` or reads its members through ``self.app`` (``notify``,
    ``push_screen``, ``post_message``, ``call_from_thread`` and the like are Textual's, on any app)."""
    textual_app = {"notify", "push_screen", "post_message", "call_from_thread", "copy_to_clipboard", "size",
                   "run_action", "get_key_display", "active_bindings", "pop_screen", "exit"}
    reached: list[str] = []
    for path in sorted((ROOT / "tui" / "console").glob("*/*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "app" and node.attr not in textual_app:
                reached.append(f"{path.relative_to(ROOT)}:{node.lineno} self.app.{node.attr}")
            if isinstance(node, ast.Name) and node.id == "ConsoleApp":
                reached.append(f"{path.relative_to(ROOT)}:{node.lineno} ConsoleApp")
    assert reached == []
