"""Every reason a site can be left on stock is in one list (``selection.REASONS``), and README's
table of reasons lists each of them: each row, its ``...`` standing for any text, matches the
start of the reasons it stands for."""

import ast
import pathlib
import re
import string

import pytest
import torch

import inductor_mm_plugin
from inductor_mm_plugin.inductor.measure import MARGIN, MIN_SAVING_US, ROUND_MARGIN, Measurement
from inductor_mm_plugin.inductor.selection import REASONS, not_routed
from inductor_mm_plugin.interpreter import interpreter_defect_of

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = pathlib.Path(inductor_mm_plugin.__file__).parent

# A value for each field of the templates, as the code fills it in (a new field needs one here).
SAMPLE_FIELDS = {
    "dtypes": sorted(map(str, {torch.float16, torch.float32})),
    "dtype": torch.float64,
    "device": torch.device("mps"),
    "operand": "b",
    "strides": (2, 8),
    "module": repr("layers.2"),
    "name": repr("elsewhere.Block"),
    "measured": Measurement(10.0, 9.5, (0.94, 0.95, 0.96, 0.95, 0.95), graphs=True).describe(),
    "round_margin": ROUND_MARGIN,
    "margin": MARGIN,
    "saving": MIN_SAVING_US,
    "plan": "plan.json",
    "rows": "12 shapes of class skinny-bf16-linear measured 0.71-0.93x cuBLAS",
    "gpu": "NVIDIA H200",
    "triton": "3.6.0",
    "numpy": "2.4.1",
}


def readme_reasons() -> list[str]:
    text = (ROOT / "README.md").read_text()
    table = text[text.index("| reason | what to do |"):].split("\n\n", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", table, flags=re.M)


def sample(kind: str) -> str:
    fields = {name for _, name, _, _ in string.Formatter().parse(REASONS[kind]) if name}
    return not_routed(kind, **{name: SAMPLE_FIELDS[name] for name in fields})


def matches(row: str, reason: str) -> bool:
    pattern = ".*?".join(map(re.escape, row.split("...")))
    return re.match(pattern, reason) is not None


def test_readme_lists_every_reason():
    rows = readme_reasons()
    assert rows, "README.md has no reasons table"
    reasons = {kind: sample(kind) for kind in REASONS}
    unlisted = {kind: text for kind, text in reasons.items() if not any(matches(row, text) for row in rows)}
    assert not unlisted, f"reasons README.md's table does not list: {unlisted}"
    stale = [row for row in rows if not any(matches(row, text) for text in reasons.values())]
    assert not stale, f"README.md lists reasons the code does not give: {stale}"


def test_the_interpreters_reason_is_the_listed_one():
    # The routing pass words it with the interpreter check's own text (interpreter.py).
    assert "not eligible: " + interpreter_defect_of("3.6.0", "2.4.1") == sample("interpreter_defect")


def test_every_listed_reason_is_one_the_code_gives():
    """Each kind is named somewhere in the package besides the list (a kind nothing gives is a
    stale row); ``not_routed`` takes only listed kinds."""
    named = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        keys = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "REASONS" for t in node.targets):
                keys = {id(k) for k in node.value.keys}
        named |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in keys}
    # the interpreter's reason is worded by interpreter.py's check (test above)
    assert set(REASONS) - named == {"interpreter_defect"}
    with pytest.raises(KeyError):
        not_routed("no_such_reason")
