"""``inductor_mm_plugin.reset()``: every piece of process-level state the package holds is either
forgotten by reset() or kept on purpose (``inductor_mm_plugin/state.py`` lists both), read from
the source; reset() forgets each holder it lists and keeps the others."""

import ast
import collections
import importlib
import pathlib

import pytest
import torch
from conftest import DEVICE

import inductor_mm_plugin
from inductor_mm_plugin import state

PACKAGE = pathlib.Path(inductor_mm_plugin.__file__).parent
MUTATORS = {"append", "add", "update", "clear", "pop", "popitem", "setdefault", "extend", "insert", "remove", "discard"}
CACHES = {"cache", "lru_cache"}


def _module_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _decorator_name(d: ast.expr) -> str:
    d = d.func if isinstance(d, ast.Call) else d
    return d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", "")


def holders() -> set[str]:
    """ "module.name" of every module-level name the package changes after import: rebound
    (``global``), its items set or deleted, a mutating method called on it; and every
    function with a ``functools`` cache."""
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text(), str(path))
        top = _module_names(tree)
        mine = set()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any(_decorator_name(d) in CACHES for d in node.decorator_list):
                mine.add(node.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                mine.update(n for n in node.names if n in top)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in top:
                        mine.add(t.value.id)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
                if isinstance(node.func.value, ast.Name) and node.func.value.id in top:
                    mine.add(node.func.value.id)
        found.update(f"{module}.{name}" if module else name for name in mine)
    return found


def test_every_holder_is_forgotten_or_kept_on_purpose():
    found = holders()
    unlisted = sorted(found - state.FORGOTTEN.keys() - state.KEPT.keys())
    assert not unlisted, f"state no list in inductor_mm_plugin/state.py names (FORGOTTEN or KEPT): {unlisted}"
    gone = sorted((state.FORGOTTEN.keys() | state.KEPT.keys()) - found)
    assert not gone, f"listed in state.py, but no module holds them now: {gone}"
    assert not state.FORGOTTEN.keys() & state.KEPT.keys()


def _value(name: str):
    module, attr = name.rsplit(".", 1)
    return getattr(importlib.import_module(f"inductor_mm_plugin.{module}"), attr)


def _forgotten(name: str) -> bool:
    value = _value(name)
    if hasattr(value, "cache_info"):
        return value.cache_info().currsize == 0
    if isinstance(value, bool):
        return value is True  # direct launch: on
    if isinstance(value, (dict, list, set, collections.Counter)):
        return not value
    return value is None


def test_reset_forgets_what_the_process_learned_and_keeps_the_rest(monkeypatch):
    from inductor_mm_plugin.configs import selector
    from inductor_mm_plugin.inductor import measure, records, shape_table
    from inductor_mm_plugin.interpreter import interpreter_defect
    from inductor_mm_plugin.runtime import device, direct, split_k

    launch = importlib.import_module("inductor_mm_plugin.runtime.launch")  # runtime.launch is also a function

    # Something learned in every holder: by a call where this machine makes one, else set.
    a, b = torch.randn(8, 8, device=DEVICE), torch.randn(8, 8, device=DEVICE)
    for _ in range(2):  # on CUDA the second call takes the direct launch
        inductor_mm_plugin.mm(a, b)
    launch._FAST_PLANS.setdefault(("test",), None)
    inductor_mm_plugin.runtime.compile_behind([(a, b, torch.empty(8, 8, device=DEVICE))], workers=1)
    launch._tuning_cache(a.device)
    measure.routing_cache("TEST GPU")
    measure._MEMORY["test"] = measure.Measurement(1.0, 2.0, (2.0,), False)
    shape_table.table("TEST GPU")
    selector.table()
    device._NUM_SMS.setdefault(-1, 1)
    device._CAPABILITIES.setdefault(-1, (9, 0))
    split_k.counters(torch.device("cpu"), 4)
    monkeypatch.setattr(direct, "enabled", False)  # as after a launcher refused a call
    direct.launch_hooks_active()
    interpreter_defect()
    records._from_the_pass["test"] += 1
    assert not [name for name in state.FORGOTTEN if _forgotten(name)]

    class Marked(torch.nn.Module):
        pass

    inductor_mm_plugin.opt_in(Marked)
    autotune = inductor_mm_plugin.set_autotune(True)
    try:
        inductor_mm_plugin.reset()
        assert [name for name in state.FORGOTTEN if not _forgotten(name)] == []
        # What it keeps: settings and markers.
        assert launch._AUTOTUNE is True
        from inductor_mm_plugin.inductor.selection import marked_classes_fingerprint

        assert any(name.endswith("Marked") for name, _ in marked_classes_fingerprint())
    finally:
        inductor_mm_plugin.set_autotune(autotune)
    # And the plugin works as before: the next call plans again.
    torch.testing.assert_close(inductor_mm_plugin.mm(a, b), a @ b)
    assert launch._PLANS


@pytest.mark.gpu
def test_gpu_reset_looks_the_gpu_up_again():
    from inductor_mm_plugin.runtime import device

    dev = torch.device("cuda", torch.cuda.current_device())
    sms = device.num_sms(dev)
    inductor_mm_plugin.reset()
    assert not device._NUM_SMS
    assert device.num_sms(dev) == sms == torch.cuda.get_device_properties(dev).multi_processor_count
