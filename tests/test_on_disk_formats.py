"""Property-based tests of the validators of every on-disk format: the tuning cache and the
routing cache (runtime/tuning.py, inductor/measure.py) and routing plans (inductor/plan_file.py).

Each example writes a file hypothesis draws: arbitrary JSON, text that is not JSON, deeply
nested arrays and objects, or a valid document with one part replaced, deleted or added
(any depth, any JSON value: NaN, inf, bools for ints, strings for lists, ...). Garbage must
give "ignored" (caches: a miss, so the entry is measured again) or a clear error (plans:
PlanError), never another exception; and whatever is accepted must be what a valid document
says, with every field of its type (no decision read from garbage).

Budget: about 1500 examples a run, a few seconds in all (no kernel runs). New examples each
run (derandomize=False); no example database is written.
"""

import copy
import dataclasses
import json
import math
import pathlib
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inductor_mm_plugin.configs import MatmulConfig
from inductor_mm_plugin.inductor import plan_file
from inductor_mm_plugin.inductor.measure import Measurement, RoutingCache
from inductor_mm_plugin.runtime.tuning import TuningCache, kernel_source_hash


def _settings(max_examples: int):
    return settings(max_examples=max_examples, deadline=None, derandomize=False, print_blob=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip


@pytest.fixture(scope="module")
def folder():
    with tempfile.TemporaryDirectory() as path:
        yield pathlib.Path(path)


# --------------------------------------------------------------------------- documents

SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(max_size=8))  # fmt: skip
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                         max_size=4), max_leaves=12)


@st.composite
def mutated(draw, document):
    """``document`` with one part, at any depth, replaced by any JSON value, deleted, or
    joined by a new key."""
    document = copy.deepcopy(document)

    def change(node):
        if isinstance(node, (dict, list)) and node and draw(st.booleans()):
            key = draw(st.sampled_from(list(node) if isinstance(node, dict) else range(len(node))))
            action = draw(st.sampled_from(["descend", "replace", "delete", "add"]))
            if action == "descend":
                node[key] = change(node[key])
            elif action == "replace":
                node[key] = draw(JSON)
            elif action == "delete":
                del node[key]
            elif isinstance(node, dict):
                node[draw(st.text(max_size=8))] = draw(JSON)
            else:
                node.append(draw(JSON))
            return node
        return draw(JSON)

    return change(document)


def deep(n: int) -> str:
    return "[" * n + "]" * n


def texts(document):
    """File contents: the document changed, any JSON, text that is not JSON, deep nesting."""
    return st.one_of(
        mutated(document).map(json.dumps),
        JSON.map(json.dumps),
        st.text(max_size=40),
        st.integers(500, 200_000).map(deep),
        st.integers(500, 50_000).map(lambda n: json.dumps({**document, "x": 0})[:-1] + ', "y": ' + deep(n) + "}"),
    )


# ------------------------------------------------------------------------ tuning cache

CONFIG = MatmulConfig("tma", 128, 128, 64, 8, 8, 4, epilogue_subtile=True, flatten=True)
ENTRY = {"config": CONFIG.to_json(), "ms": 1.5, "timings_ms": {CONFIG.short(): 1.5, "other": None}}
KEY = "bf16|4096x4096x4096"


def _tuning_file(cache):
    return {"header": cache.header, "entries": {KEY: ENTRY, "other": ENTRY}}


@_settings(max_examples=500)
@given(data=st.data())
def test_tuning_cache_ignores_garbage_and_reads_only_valid_entries(folder, data):
    cache = TuningCache("NVIDIA H200", "3.6.0", kernel_source_hash(), directory=folder)
    text = data.draw(texts(_tuning_file(cache)), label="file")
    cache.path.write_text(text)
    got = TuningCache("NVIDIA H200", "3.6.0", kernel_source_hash(), directory=folder).get(KEY)
    if got is None:
        return
    entry = json.loads(text)["entries"][KEY]  # accepted: it must be a valid entry, read as written
    assert got == MatmulConfig(**entry["config"])
    assert all(type(getattr(got, f)) is type(getattr(CONFIG, f)) for f in CONFIG.to_json())
    got.validate()
    assert type(entry["ms"]) in (int, float) and math.isfinite(entry["ms"]) and entry["ms"] >= 0


# ----------------------------------------------------------------------- routing cache

MEASURED = {"plugin_us": 8.0, "aten_us": 10.0, "ratios": [1.25, 1.2, 1.3, 1.25, 1.24], "graphs": False,
            "plugin_host_us": 9.0, "aten_host_us": 4.5}


def _check_measurement(m: Measurement) -> None:
    for value in (m.plugin_us, m.aten_us, *m.ratios):
        assert type(value) is float and math.isfinite(value) and value > 0
    for value in (m.plugin_host_us, m.aten_host_us):
        assert type(value) is float and math.isfinite(value) and value >= 0
    assert m.ratios and type(m.graphs) is bool
    assert isinstance(m.faster, bool) and m.describe()  # the decision and its reason never raise


@_settings(max_examples=400)
@given(entry=st.one_of(mutated(MEASURED), JSON))
def test_a_routing_cache_entry_is_a_measurement_or_a_value_error(entry):
    try:
        got = Measurement.from_json(entry)
    except ValueError:
        return
    _check_measurement(got)
    # A JSON integer time reads as the nearest float (2**53 + 1 as 2**53).
    as_float = {k: float(v) if type(v) is int else v for k, v in entry.items()}
    assert dataclasses.asdict(got) == {**as_float, "ratios": tuple(float(r) for r in entry["ratios"])}


@_settings(max_examples=200)
@given(data=st.data())
def test_routing_cache_file_garbage_is_never_a_crash(folder, data):
    store = RoutingCache("TEST GPU", "3.6.0", "abc", folder, torch="2.11.0")
    text = data.draw(texts({"header": store.header, "entries": {KEY: MEASURED}}), label="file")
    store.path.write_text(text)
    entry = RoutingCache("TEST GPU", "3.6.0", "abc", folder, torch="2.11.0").get_entry(KEY)
    try:
        _check_measurement(Measurement.from_json(entry))
    except ValueError:
        pass


# ------------------------------------------------------------------------------ plans

SITE = "forward|up|addmm|32 8x16 16x32|1 16,1 1,16|float32"


def _plan_document():
    return {"format": plan_file.FORMAT, "version": plan_file.FORMAT_VERSION, "model": "MLP",
            "setup": plan_file.setup(), "sites": [{"site": SITE, "route": True}, {"site": "b", "route": False},
                                                  {"site": "c", "route": True, "fused": "swiglu"}]}  # fmt: skip


@_settings(max_examples=400)
@given(data=st.data())
def test_a_plan_is_loaded_as_written_or_refused_with_plan_error(folder, data):
    path = folder / "plan.json"
    text = data.draw(texts(_plan_document()), label="file")
    path.write_text(text)
    try:
        plan = plan_file.load(path)
    except plan_file.PlanError as e:
        assert str(e).startswith("inductor_mm_plugin: ") and "\n" not in str(e)
        return
    written = json.loads(text)
    assert plan.setup == written["setup"] and all(plan.setup[k] == v for k, v in plan_file.setup().items())
    assert plan.route == {s["site"]: s["route"] for s in written["sites"]}
    assert all(type(k) is str and type(v) is bool for k, v in plan.route.items())
    assert plan.fused == {s["site"]: s["fused"] for s in written["sites"] if "fused" in s}
    assert all(plan.route[k] for k in plan.fused)  # a fused site is a routed one
