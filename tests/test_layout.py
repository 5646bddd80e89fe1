"""The package's shape: no import cycle between modules (lazy imports inside functions count; a
package ``__init__`` re-exporting its children does not), no module above 450 lines, and no
``SimpleNamespace`` / ``build_task`` hub or private backend flag in the package or the tests."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "ssvm_torch"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict:
    return {module_name(p): p for p in PKG.rglob("*.py")}


def reexports(mods) -> dict:
    """For each package: name -> the child module it re-exports the name from."""
    out = {}
    for name, path in mods.items():
        if path.name != "__init__.py":
            continue
        table = {}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                for a in node.names:
                    table[a.asname or a.name] = f"{name}.{node.module}"
        out[name] = table
    return out


def import_edges(mods) -> dict:
    exported = reexports(mods)
    edges = {m: set() for m in mods}
    for name, path in mods.items():
        if path.name == "__init__.py":
            continue                        # re-exports of children do not count
        package = name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not target.startswith("ssvm_torch"):
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in mods:
                        edges[name].add(sub)
                    elif target in exported and a.name in exported[target]:
                        edges[name].add(exported[target][a.name])
                    elif target in mods:
                        edges[name].add(target)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("ssvm_torch") and a.name in mods:
                        edges[name].add(a.name)
        edges[name].discard(name)
    return edges


def find_cycle(edges):
    state, stack = {}, []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(edges.get(u, ())):
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if v not in state:
                found = visit(v)
                if found:
                    return found
        stack.pop()
        state[u] = 2
        return None
    for u in sorted(edges):
        if u not in state:
            found = visit(u)
            if found:
                return found
    return None


def test_no_import_cycles():
    edges = import_edges(modules())
    assert edges["ssvm_torch.stores.chain"] >= {"ssvm_torch.models.chain"}          # the parser sees imports
    assert find_cycle(edges) is None, " -> ".join(find_cycle(edges))


def test_models_import_no_store_or_solver():
    edges = import_edges(modules())
    for name, targets in edges.items():
        if name.startswith("ssvm_torch.models"):
            bad = {t for t in targets if t.startswith(("ssvm_torch.stores", "ssvm_torch.solvers"))}
            assert not bad, f"{name} imports {bad}"


def test_modules_stay_small():
    sizes = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    assert max(sizes.values()) <= 450, {k: v for k, v in sizes.items() if v > 450}


def test_no_hub_or_private_flags():
    pattern = re.compile(r"SimpleNamespace|build_task|\b_cpu\b")
    hits = [f"{p.relative_to(ROOT)}:{i + 1}" for base in (PKG, ROOT / "tests") for p in base.rglob("*.py")
            if p.name != "test_layout.py" for i, line in enumerate(p.read_text().splitlines()) if pattern.search(line)]
    assert not hits, hits


def test_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
