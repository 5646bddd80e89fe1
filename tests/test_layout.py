"""The package's shape: no import cycle between modules (lazy imports inside functions count; a
package ``__init__`` re-exporting its children does not), no module above 450 lines, and no
``SimpleNamespace`` / ``build_task`` hub or private backend flag in the package or the tests; CI runs the test
command with every tier but the slow one."""
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


# The import layers, bottom-up (docs/design.md, "Import layers"): a unit (a folder of ssvm_torch, or a
# top-level module) imports only from its own layer or below, and the units' import graph has no loop.
LAYERS = [
    {"errors", "devices", "atomic", "version", "grad_mode"},
    {"chain", "trees", "segments", "spans", "align", "oracles", "constraints", "collectives"},
    {"data", "nn"},
    {"models"},
    {"stores"},
    {"solvers", "tasks", "task_predictions", "problem", "ud_tasks", "labeler", "distributed", "rank_store", "column_shards", "column_shards_edges",
     "perceptron", "perceptron_compiled"},
    {"estimator", "segment_estimator", "graph_estimator", "fingerprint", "portable", "perceptron_estimator"},
    {"outputs"},
    {"path", "path_resume", "path_rows", "lightning", "latent", "latent_graph", "latent_estimator", "latent_node_estimator"},
    {"deep", "selection"},
    {"cli", "train"},
]


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<root>"


def unit_edges(edges) -> dict:
    out = {}
    for a, targets in edges.items():
        for b in targets:
            if unit(a) != unit(b):
                out.setdefault(unit(a), set()).add(unit(b))
    return out


def layer_violations(edges, layers) -> list:
    level = {u: i for i, layer in enumerate(layers) for u in layer}
    bad = []
    for a, targets in sorted(edges.items()):
        if unit(a) == "<root>":
            continue                              # ssvm_torch/__init__.py re-exports the API: above every layer
        for b in sorted(targets):
            if unit(b) == "<root>":
                bad.append(f"{a} imports the package root (import the module that defines the name)")
            elif unit(a) not in level or unit(b) not in level:
                bad.append(f"{a} -> {b}: {unit(a) if unit(a) not in level else unit(b)} has no layer in LAYERS")
            elif level[unit(b)] > level[unit(a)]:
                bad.append(f"{a} (layer {level[unit(a)]}) imports {b} (layer {level[unit(b)]})")
    return bad


def test_imports_follow_the_layers_and_no_folder_loop():
    edges = import_edges(modules())
    assert layer_violations(edges, LAYERS) == []
    units = unit_edges(edges)
    units.pop("<root>", None)
    assert find_cycle(units) is None, " -> ".join(find_cycle(units))


def test_layer_check_catches_an_upward_import_and_a_folder_loop():
    edges = {"ssvm_torch.data.x": {"ssvm_torch.solvers.loop"}, "ssvm_torch.solvers.loop": set()}
    assert layer_violations(edges, LAYERS) == ["ssvm_torch.data.x (layer 2) imports ssvm_torch.solvers.loop (layer 5)"]
    assert "package root" in layer_violations({"ssvm_torch.outputs": {"ssvm_torch"}}, LAYERS)[0]
    loop = unit_edges({"ssvm_torch.chain.a": {"ssvm_torch.oracles.b"}, "ssvm_torch.oracles.c": {"ssvm_torch.chain.d"}})
    assert find_cycle(loop) is not None


def test_design_md_names_every_module():
    """docs/design.md's file map names every module by its path relative to ssvm_torch/ (a folder entry
    does not count; package __init__ files only where they hold more than re-exports are optional)."""
    text = (ROOT / "docs" / "design.md").read_text()
    named = set(re.findall(r"(?<![\w/.])((?:[a-z_]+/)?[a-z_]+\.py)\b", text))
    missing = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
                     if p.name != "__init__.py" and str(p.relative_to(PKG)) not in named)
    assert missing == []


def test_ci_runs_the_test_command_with_every_tier_but_slow():
    """.ci/run calls the README's test command with the long tests (SSVM_LONG=1), and scripts/test.sh maps the
    tiers to the markers pyproject registers: by default the quick tier (neither long nor slow), with SSVM_LONG=1
    every test not marked slow (docs/design.md, "Tests"): moving a test to the long tier never takes it out of CI."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^SSVM_LONG=1 bash scripts/test\.sh\b", ci, re.M), ci
    test_sh = (ROOT / "scripts" / "test.sh").read_text()
    assert re.search(r'"\$\{SSVM_LONG:-0\}" = "1" \]; then marks=\(-m "not slow"\)', test_sh), test_sh
    assert 'else marks=(-m "not slow and not long"); fi' in test_sh
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^\s*"long: ', pyproject, re.M) and re.search(r'^\s*"slow: ', pyproject, re.M)
    assert "--strict-markers" in pyproject
    assert "bash scripts/test.sh" in (ROOT / "README.md").read_text()
