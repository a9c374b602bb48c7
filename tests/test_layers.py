"""The package's layers (docs/design.md, "Layers"): each module imports only from its own layer
or the layers below it, and nothing imports the package root. Read from the source with
``ast``, nothing imported, so a back arrow fails here even in a module no test imports."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "inductor_mm_plugin"

# Lowest first. Leaves (the version, the environment's facts, the private torch._C calls the
# layers below inductor/ make) may be imported from anywhere and import nothing of the package.
LEAVES = {"version", "interpreter", "torch_c"}
LAYERS = [
    ("kernels",),  # @triton.jit code
    ("configs",),  # which config a call gets
    ("runtime",),  # from a call to a launch
    ("ops",),  # the torch ops
    ("inductor",),  # inside torch.compile
    ("comparison", "opt_in", "state"),  # the user surface
    ("cli", "__main__"),
]
ROOT = len(LAYERS)  # the package root re-exports the surface: above everything, imported by nothing

# Imports that run back up in files another issue is rewriting, each with the fix that
# removes it (issue 30); delete an entry when its file is fixed.
KNOWN: set[tuple[str, str]] = set()


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, pathlib.Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int | None:
    """The module's layer (-1 for a leaf), or None for one this test does not know."""
    parts = module.split(".")[1:]
    if not parts:
        return ROOT
    if len(parts) == 1 and parts[0] in LEAVES:
        return -1
    for rank, names in enumerate(LAYERS):
        if parts[0] in names:
            return rank
    return None


def imports(module: str, path: pathlib.Path, known: dict) -> set[str]:
    """The package modules ``module`` imports, anywhere in the file (functions included):
    ``from .x import y`` is the module ``x.y`` where that is a module, else ``x`` itself."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "inductor_mm_plugin")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                source = f"{base}.{node.module}" if node.module else base
            elif (node.module or "").split(".")[0] == "inductor_mm_plugin":
                source = node.module
            else:
                continue
            for alias in node.names:
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source)
    return found


def test_every_module_has_a_layer():
    unknown = sorted(m for m in modules() if layer(m) is None)
    assert not unknown, f"modules in no layer: {unknown}; add their folder to LAYERS here and in docs/design.md"


@pytest.mark.parametrize("module", sorted(modules()))
def test_imports_only_from_its_layer_or_below(module):
    known = modules()
    own = layer(module)
    back = []
    for target in sorted(imports(module, known[module], known)):
        if target not in known:
            continue  # a name the package does not define; Python itself reports that
        theirs = layer(target)
        if own == -1 and theirs != -1:
            back.append(f"{target} (a leaf imports nothing of the package)")
        elif target == "inductor_mm_plugin" or (theirs > own and theirs != -1):
            if (module, target) not in KNOWN:
                back.append(target)
    assert not back, f"{module} imports up a layer: {back} (docs/design.md, Layers)"


def test_known_back_arrows_still_exist():
    """Each KNOWN entry is still there: once its file is fixed, the entry goes."""
    known = modules()
    stale = [pair for pair in KNOWN if pair[1] not in imports(pair[0], known[pair[0]], known)]
    assert not stale, f"fixed, remove from KNOWN: {stale}"
