"""``opt_in`` / ``opt_out`` on instances: the marked models pickle (``torch.save``), load with
their markers, and deep-copy (issue 24). Routing by marker is tested in test_routing.py."""

import copy
import io
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
from conftest import DEVICE
from integration_utils import MLP, count_calls, no_graph_caches, run_compiled

from inductor_mm_plugin import opt_in, opt_out
from inductor_mm_plugin.inductor.selection import marker_of


def marked_model():
    """An MLP inside a Sequential with its ``up`` opted in and its ``down`` opted out."""
    model = nn.Sequential(MLP(), nn.ReLU())
    opt_in(model[0].up)
    opt_out(model[0].down)
    return model


def markers(model):
    return {name: marker_of(m) for name, m in model.named_modules() if marker_of(m)}


def assert_same_model(loaded, model):
    assert markers(loaded) == markers(model) == {"0.up": "in", "0.down": "out"}
    for (name, a), (_, b) in zip(loaded.named_modules(), model.named_modules()):
        assert type(a) is type(b), name  # the marked subclass, shared with the original
    for (name, p), (_, q) in zip(loaded.state_dict().items(), model.state_dict().items()):
        assert torch.equal(p, q), name
    assert isinstance(loaded[0].up, nn.Linear) and type(loaded[0].up).__qualname__ == "Linear[opt_in]"


def test_a_marked_instance_cannot_be_found_by_its_class_name():
    # What made torch.save fail (PicklingError): pickle looks the class up by qualified name.
    model = marked_model()
    assert not hasattr(sys.modules[nn.Linear.__module__], type(model[0].up).__qualname__)


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL], ids=lambda p: f"protocol{p}")
def test_torch_save_and_load_keep_the_markers(protocol):
    model = marked_model()
    buffer = io.BytesIO()
    torch.save(model, buffer, pickle_protocol=protocol)  # torch.save's default protocol is 2
    buffer.seek(0)
    # A whole module (not a state_dict) is arbitrary pickled code: weights_only=False.
    assert_same_model(torch.load(buffer, weights_only=False), model)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1), ids=lambda p: f"protocol{p}")
def test_pickle_every_protocol(protocol):
    model = marked_model()
    assert_same_model(pickle.loads(pickle.dumps(model, protocol=protocol)), model)


def test_deepcopy_keeps_the_markers_and_copies_the_weights():
    model = marked_model()
    clone = copy.deepcopy(model)
    assert_same_model(clone, model)
    assert clone[0].up.weight.data_ptr() != model[0].up.weight.data_ptr()


def test_loaded_in_a_fresh_process_the_markers_come_back(tmp_path):
    """A process that never marked anything rebuilds the marked subclasses on load."""
    path = tmp_path / "model.pt"
    torch.save(marked_model().cpu(), path)
    code = textwrap.dedent(
        f"""
        import sys, torch
        model = torch.load({str(path)!r}, weights_only=False)
        from inductor_mm_plugin.inductor.selection import marker_of
        print(sorted((n, marker_of(m)) for n, m in model.named_modules() if marker_of(m)))
        print(type(model[0].up).__qualname__, isinstance(model[0].up, torch.nn.Linear))
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.path.dirname(__file__)})  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split("\n")[:2] == ["[('0.down', 'out'), ('0.up', 'in')]", "Linear[opt_in] True"], res.stdout


def test_a_loaded_model_routes_by_its_markers():
    buffer = io.BytesIO()
    torch.save(marked_model(), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    x = torch.randn(4, 16, device=DEVICE)
    with no_graph_caches():
        _, _, codes = run_compiled(loaded, x, fresh_cache=False, backend="inductor_mm_plugin", options={"select": "all"})
    assert count_calls(codes) == (1, 1)  # up routed, down opted out
