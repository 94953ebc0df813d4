"""The package's shape, checked in ``make lint``: floors and imports (errors), sizes (warnings).

Errors (``make lint`` fails):

- Floors: a module imports only from its own floor or the floors below it (``FLOORS``,
  bottom first), and the module-level imports form no cycle. The core (``CORE``: the model
  library) sits below the course's layers, so it never imports them.
- No function-local import of a ``transformer_book`` module outside the CLI (optional
  heavy third-party packages may still be imported lazily).

Warnings (printed; they do not fail): a module over ``MAX_MODULE_LINES`` lines or a function
over ``MAX_FUNCTION_LINES``. Sizes follow from the design: a long one is a prompt to look for
a second idea inside it, never a reason to cut a function at an arbitrary line.

Run ``python scripts/check_structure.py``; it prints each problem and exits 1 if there is
an error.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "transformer_book"
#: The core: what pyproject.toml's own dependencies are for (tests/test_core_imports.py).
CORE = ("util", "data", "nn", "run", "inference", "train")
#: Bottom first: the core, then the layers each with its extra (pyproject.toml), then the CLI.
FLOORS = (*CORE, "baselines", "toy", "analysis", "interop", "course", "cli")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def floor_of(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    return FLOORS.index(top) if top in FLOORS else -1


def _imports(node: ast.AST) -> list[str]:
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [node.module]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return []


def check_file(path: Path, graph: dict[str, set[str]]) -> tuple[list[str], list[str]]:
    """``(errors, warnings)`` of one module; its module-level imports go into ``graph``."""
    problems, warnings = [], []
    name = module_name(path)
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        warnings.append(f"{name}: {lines} lines (more than {MAX_MODULE_LINES})")
    graph[name] = set()
    for node in tree.body:
        for target in _imports(node):
            if target.startswith("transformer_book."):
                graph[name].add(target)
                if floor_of(target) > floor_of(name) >= 0:
                    problems.append(f"{name}: imports {target} from a floor above its own")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            key = f"{name}:{node.name}"
            if length > MAX_FUNCTION_LINES:
                warnings.append(f"{key}: {length} lines (more than {MAX_FUNCTION_LINES})")
            if name == "transformer_book.cli":
                continue
            for inner in ast.walk(node):
                for target in _imports(inner):
                    if target.startswith("transformer_book"):
                        problems.append(f"{key}: imports {target} inside a function")
    return problems, warnings


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """Import cycles among the package's modules (a package imports its ``__init__``)."""
    def parents(module: str) -> list[str]:
        parts = module.split(".")
        return [".".join(parts[:i]) for i in range(2, len(parts))]

    # Importing a.b.c runs a's and a.b's __init__ first, unless the importer is inside them.
    edges = {m: {t for t in ts if t in graph} for m, ts in graph.items()}
    for m, ts in graph.items():
        for t in ts:
            edges[m] |= {p for p in parents(t)
                         if p in graph and p != m and not m.startswith(p + ".")}
    found, state = [], {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                found.append(" -> ".join([*stack[stack.index(t):], t]))
            elif t not in state:
                visit(t, [*stack, t])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    return [f"import cycle: {c}" for c in found]


def main() -> int:
    graph: dict[str, set[str]] = {}
    problems, warnings = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        errors, long = check_file(path, graph)
        problems += errors
        warnings += long
    problems += cycles(graph)
    for warning in warnings:
        print(f"warning: {warning}")
    for problem in problems:
        print(f"error: {problem}")
    print(f"check_structure: {len(problems)} error(s), {len(warnings)} size warning(s) "
          f"in {len(graph)} modules")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
