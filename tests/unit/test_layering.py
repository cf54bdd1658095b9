"""The layer table in docs/architecture.md holds: no import cycle, no import from a higher layer,
and no pure module importing trio, sockets, threads or FUSE (or an impure hdfsfuse module)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "hdfsfuse"
IMPURE = {"trio", "socket", "threading", "selectors", "asyncio", "subprocess", "pyfuse3", "concurrent", "mmap"}


def _doc_section(title: str) -> str:
    text = (REPO / "docs" / "architecture.md").read_text()
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def layer_table() -> dict[str, int]:
    """Package or module -> layer, from the table in docs/architecture.md."""
    layers = {}
    for row in re.findall(r"^\| (\d+) \| ([^|]+) \|", _doc_section("Layers"), flags=re.M):
        for name in re.findall(r"`([\w.]+)`", row[1]):
            layers[name] = int(row[0])
    return layers


def pure_modules() -> set[str]:
    return set(re.findall(r"^\| `([\w.]+)` \|", _doc_section("Pure modules"), flags=re.M))


def module_name(path: Path, root: Path = REPO) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, known: set[str]) -> set[str]:
    """The modules a source imports (`from a import b` names a.b when that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """Every module under `root` (a package folder) and what it imports."""
    sources = {module_name(p, root.parent): p.read_text() for p in root.rglob("*.py")}
    extensions = {module_name(p, root.parent) for p in root.rglob("*.c")}  # C extensions: pure, no imports
    return {name: imports_of(source, set(sources) | extensions) for name, source in sources.items()}


def layer_of(module: str, layers: dict[str, int]) -> int | None:
    best = max((name for name in layers if module == name or module.startswith(name + ".")), key=len, default=None)
    return None if best is None else layers[best]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles among the graph's own modules (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(t for t in graph[node] if t in graph):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layering_errors(graph: dict[str, set[str]], layers: dict[str, int], pure: set[str]) -> list[str]:
    errors = [f"import cycle: {' -> '.join(c)}" for c in cycles(graph)]
    for module, imported in sorted(graph.items()):
        if module == "hdfsfuse":
            continue  # the package root: its version, nothing else
        own = layer_of(module, layers)
        if own is None:
            errors.append(f"{module}: in no layer of docs/architecture.md")
            continue
        is_pure = layer_of(module, {name: 0 for name in pure}) is not None
        for target in sorted(imported):
            top = target.split(".")[0]
            if is_pure and top in IMPURE:
                errors.append(f"{module} is pure but imports {target}")
            if top != "hdfsfuse" or target not in graph:
                continue
            theirs = layer_of(target, layers)
            if theirs is not None and theirs > own:
                errors.append(f"{module} (layer {own}) imports {target} (layer {theirs})")
            if is_pure and graph[target] and layer_of(target, {name: 0 for name in pure}) is None:
                errors.append(f"{module} is pure but imports {target}, which is not")
    return errors


def test_the_package_keeps_its_layers() -> None:
    assert layering_errors(import_graph(PACKAGE), layer_table(), pure_modules()) == []


def test_every_pure_module_exists() -> None:
    graph = import_graph(PACKAGE)
    assert not [name for name in pure_modules() if name not in graph]


def _plant(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for name, text in files.items():
        path = tmp_path / "hdfsfuse" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in [tmp_path / "hdfsfuse", *(tmp_path / "hdfsfuse").rglob("*")]:
        if folder.is_dir():
            (folder / "__init__.py").touch()
    return import_graph(tmp_path / "hdfsfuse")


@pytest.mark.parametrize(("files", "expected"), [
    ({"client/a.py": "from hdfsfuse.erasure import b\n", "erasure/b.py": "from hdfsfuse.client.a import X\n"},
     "import cycle: hdfsfuse.client.a -> hdfsfuse.erasure.b"),
    ({"datanode/dtp.py": "from hdfsfuse.client import a\n", "client/a.py": ""},
     "hdfsfuse.datanode.dtp (layer 4) imports hdfsfuse.client.a (layer 7)"),
    ({"datanode/dtp.py": "import trio\n"}, "hdfsfuse.datanode.dtp is pure but imports trio"),
    ({"datanode/dtp.py": "from hdfsfuse.datanode import reader\n", "datanode/reader.py": "import trio\n"},
     "hdfsfuse.datanode.dtp is pure but imports hdfsfuse.datanode.reader, which is not"),
])
def test_a_planted_violation_fails(tmp_path: Path, files: dict[str, str], expected: str) -> None:
    errors = layering_errors(_plant(tmp_path, files), layer_table(), pure_modules())
    assert expected in errors, errors
