"""Imports run down the layers of the package (issue #21): a module may import its own layer and the layers below.

Read from the source with `ast` (nothing is imported), so lazy imports inside functions count, and so does every
string constant that names an ernie_zoo module (`importlib.import_module("ernie_zoo....")`, the
"ernie_zoo.x.y:factory" specs a table resolves later) or a class defined only in higher layers (a lookup of
"ErnieZooForTokenClassificationCRF" by name): a cycle hidden in a string is still a cycle.

    0  utils, version, zoo (names -> shipped dirs), text, tokenization,  building blocks
       recipe_cli (typed command lines)
    1  models, auto                 every model class and the one registry (models/registry.py)
    2  masking, data                pretraining masking, corpora, labelled data
    3  parallel                     plans, the planner, consolidation: a leaf that never imports training
    4  training                     the training core (engines, loop, checkpoints, recipes)
    5  finetune                     fine-tuning tasks
    6  taskflow                     inference tasks
    7  evaluation                   zoo evaluation, baselines, model cards: they run the models through Taskflow
    8  serving                      Taskflow over HTTP
    9  commands, cli, the package   command lines and the top-level facade (`ernie_zoo/__init__.py`)

`ALLOWED` lists the upward imports known today and not fixed yet, each with its reason; any other upward import
fails the test, and so does an entry of `ALLOWED` that no longer occurs (remove it once it is fixed).

Inside a layer, and inside a package, there is no cycle either (issue #40): modules import one another as a tree
would, the same scan (lazy and string imports counted). A module naming its own package (an `importlib.resources`
anchor, `from . import x`) is not a cycle: Python has that package initialised before any of its modules.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ernie_zoo"

# A module's layer is that of its longest prefix here.
LAYERS = {
    "ernie_zoo.utils": 0,
    "ernie_zoo.version": 0,
    "ernie_zoo.recipe_cli": 0,
    "ernie_zoo.zoo": 0,
    "ernie_zoo.text": 0,
    "ernie_zoo.tokenization": 0,
    "ernie_zoo.models": 1,
    "ernie_zoo.auto": 1,
    "ernie_zoo.masking": 2,
    "ernie_zoo.data": 2,
    "ernie_zoo.parallel": 3,
    "ernie_zoo.training": 4,
    "ernie_zoo.finetune": 5,
    "ernie_zoo.taskflow": 6,
    "ernie_zoo.evaluation": 7,
    "ernie_zoo.serving": 8,
    "ernie_zoo.commands": 9,
    "ernie_zoo.cli": 9,
    "ernie_zoo": 9,
}

# (importing module, imported module) -> why it is still allowed. Every entry is an upward import to remove; the
# last ones went with issue #21 item 2 (the DeepSpeed engine moved to training/, the `ernie-finetune` shim left).
ALLOWED: dict[tuple[str, str], str] = {}

_MODULE_STRING = re.compile(r"ernie_zoo(\.[A-Za-z_]\w*)+(:[\w.]+)?")


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in LAYERS:
            return LAYERS[".".join(parts[:n])]
    raise KeyError(f"{module} has no layer: add its subpackage to LAYERS")


def _longest_module(name: str, modules: set[str]) -> str:
    """`name` (a module, or an attribute of one) as the longest module of the package it names."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in modules:
            return ".".join(parts[:n])
    return name


def imports_of(
    source: str, name: str, is_package: bool, modules: set[str], classes: dict[str, set[str]] | None = None
) -> set[str]:
    """The ernie_zoo modules that the code `source` of module `name` imports (at any depth), names in a string
    constant, or whose class (`classes`: class name -> defining modules) it names in a string constant."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = ".".join(base[: len(base) - node.level + 1]) if node.level else ""
            target = ".".join(p for p in (base, node.module) if p)
            found.add(target)
            # `from package import submodule` imports the submodule.
            found.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _MODULE_STRING.fullmatch(node.value) and node.value.partition(":")[0] in modules:
                found.add(node.value.partition(":")[0])  # a module's name (not an ASGI key or a logger's)
            elif node.value in (classes or {}):
                found.add(min(classes[node.value], key=layer_of))  # the lowest module defining the class
    return {_longest_module(m, modules) for m in found if m == "ernie_zoo" or m.startswith("ernie_zoo.")}


def package_imports(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the package's modules it imports, as `imports_of` reads them (itself excluded)."""
    files = {module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    trees = {m: p.read_text(encoding="utf-8") for m, p in files.items()}
    classes: dict[str, set[str]] = {}
    for module, source in trees.items():
        for node in ast.parse(source).body:
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, set()).add(module)
    return {
        importer: {
            m
            for m in imports_of(source, importer, files[importer].name == "__init__.py", set(files), classes)
            if m in files and m != importer
        }
        for importer, source in trees.items()
    }


def upward_imports(package: Path = PACKAGE) -> dict[tuple[str, str], str]:
    return {
        (importer, imported): f"layer {layer_of(importer)} imports layer {layer_of(imported)}"
        for importer, found in package_imports(package).items()
        for imported in found
        if layer_of(imported) > layer_of(importer)
    }


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """`package_imports` less each module's own parent packages (initialised before it by Python anyway)."""
    return {m: {i for i in found if not m.startswith(i + ".")} for m, found in package_imports(package).items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycle_anywhere():
    found = cycles(import_graph())
    assert not found, "modules that import one another (in a circle; move the shared code down):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_cycle_finder_sees_a_cycle_through_a_string_import():
    source = {"ernie_zoo.training.a": "from .b import X\n", "ernie_zoo.training.b": "F = 'ernie_zoo.training.c:f'\n",
              "ernie_zoo.training.c": "def f():\n    from ernie_zoo.training import a\n", "ernie_zoo.training.d": ""}  # fmt: skip
    modules = set(source) | {"ernie_zoo.training"}
    graph = {m: imports_of(s, m, False, modules) - {"ernie_zoo.training"} for m, s in source.items()}
    assert cycles(graph) == [["ernie_zoo.training.a", "ernie_zoo.training.b", "ernie_zoo.training.c"]]
    graph["ernie_zoo.training.c"] = set()
    assert cycles(graph) == []


def test_every_module_has_a_layer():
    for path in PACKAGE.rglob("*.py"):
        layer_of(module_name(path))


def test_no_new_upward_import():
    upward = upward_imports()
    new = sorted(f"{a} -> {b} ({why})" for (a, b), why in upward.items() if (a, b) not in ALLOWED)
    assert not new, "upward imports (import from a lower layer, or move the code down):\n" + "\n".join(new)


def test_allow_list_is_current():
    upward = upward_imports()
    stale = sorted(f"{a} -> {b}" for a, b in ALLOWED if (a, b) not in upward)
    assert not stale, "upward imports fixed but still in ALLOWED (remove them):\n" + "\n".join(stale)


def test_scanner_sees_lazy_relative_and_string_imports():
    source = (
        "import importlib\n"
        "def f():\n"
        "    from ..training import engine\n"
        "    return importlib.import_module('ernie_zoo.taskflow.models')\n"
        "SPEC = 'ernie_zoo.serving.server:app_from_env'\n"
        "KEY = 'ernie_zoo.arriving'\n"  # not a module
        "NAMES = ['ErnieZooEnsembleForTokenClassificationCRF']\n"
    )
    modules = {
        "ernie_zoo.training",
        "ernie_zoo.training.engine",
        "ernie_zoo.taskflow.models",
        "ernie_zoo.serving.server",
        "ernie_zoo.finetune.ensemble",
    }
    classes = {"ErnieZooEnsembleForTokenClassificationCRF": {"ernie_zoo.finetune.ensemble"}}
    assert imports_of(source, "ernie_zoo.parallel.probe", False, modules, classes) == modules
