"""The command line: the console script, --version, exit codes, and every check that must
come before anything compiles (output paths, --select, --option keys and values).

The end-to-end runs and the factory errors are in tests/test_compare.py.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import inductor_mm_plugin
from inductor_mm_plugin import cli

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
TARGET = f"{EXAMPLES}/mlp.py:make"


@pytest.fixture
def no_compare(monkeypatch):
    """compare replaced by a stub that fails the test: the command must stop before it."""

    def must_not_run(*args, **kwargs):
        raise AssertionError("compare ran: the command line should have been rejected first")

    monkeypatch.setattr("inductor_mm_plugin.comparison.compare", must_not_run)


class _Report:
    ok = True

    def __str__(self):
        return "verdict: PASS"

    def to_json(self, path):
        raise OSError(28, "No space left on device")


def test_console_script_and_module_print_the_version():
    script = pathlib.Path(sys.executable).parent / "inductor-mm-plugin"
    assert script.exists(), "the console script is not installed: pip install -e ."
    for command in ([str(script)], [sys.executable, "-m", "inductor_mm_plugin"]):
        res = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith(f"inductor_mm_plugin {inductor_mm_plugin.__version__} (torch ")


def test_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["compare", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "exit status:" in out and "1  the numerics failed" in out and "2  usage error" in out


def _unwritable_cases(tmp_path):
    a_file = tmp_path / "a_file.txt"
    a_file.write_text("")
    cases = [
        (str(tmp_path / "missing" / "ab.json"), "no such directory"),
        (str(tmp_path), "is a directory"),
        (str(a_file / "ab.json"), "no such directory"),
        ("/proc/inductor_mm_plugin_ab.json", "cannot be written"),  # not writable, not even by root
    ]
    if os.geteuid() != 0:  # root writes into a read-only folder anyway
        readonly = tmp_path / "readonly"
        readonly.mkdir(mode=0o555)
        cases.append((str(readonly / "ab.json"), "cannot be written: Permission denied"))
    return cases


@pytest.mark.parametrize("flag", ["--json", "--markdown", "--plot", "--write-plan"])
def test_output_paths_are_checked_before_anything_compiles(no_compare, tmp_path, capsys, flag):
    for path, message in _unwritable_cases(tmp_path):
        assert cli.main(["compare", TARGET, "--quiet", flag, path]) == cli.EXIT_ERROR, path
        err = capsys.readouterr().err
        assert err.startswith(f"inductor_mm_plugin compare: error: {flag} {path}: {message}"), err
        assert err.count("\n") == 1, err  # one line, no traceback
    assert not (tmp_path / "missing").exists()


def test_a_writable_path_is_left_as_it_was(monkeypatch, tmp_path):
    monkeypatch.setattr("inductor_mm_plugin.comparison.compare", lambda *a, **k: _Report())
    path = tmp_path / "ab.json"
    # The check creates the file to see that it can, and removes it again; writing the
    # report then fails (the stub's to_json), as a full disk would: one line, exit 2.
    assert cli.main(["compare", TARGET, "--quiet", "--json", str(path)]) == cli.EXIT_ERROR
    assert not path.exists()


def test_a_failing_write_after_the_comparison_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("inductor_mm_plugin.comparison.compare", lambda *a, **k: _Report())
    assert cli.main(["compare", TARGET, "--quiet", "--json", str(tmp_path / "ab.json")]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err == "inductor_mm_plugin compare: error: writing the report failed: [Errno 28] No space left on device\n"


def test_a_bad_select_is_a_usage_error(no_compare, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["compare", TARGET, "--select", "everything"])
    assert exit_.value.code == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert "argument --select: invalid choice: 'everything'" in err and "the model" not in err


@pytest.mark.parametrize(
    "option,message",
    [
        ("unknown=1", "unknown option 'unknown'. Valid keys: the plugin's 'select', 'compete', 'fuse_swiglu'"),
        ("max_autotun=true", "Did you mean 'max_autotune'"),
        ("select=everything", "select must be one of 'auto', 'all', 'opted_in'"),
        ("compete=maybe", "compete must be True, False or 'auto', got 'maybe'"),
        ("max_autotune=3", "option 'max_autotune' must be bool, got 3 (int)"),
        ("max_autotune", "--option expects KEY=VALUE, got 'max_autotune'"),
    ],
)
def test_bad_options_are_usage_errors(no_compare, capsys, option, message):
    assert cli.main(["compare", TARGET, "--quiet", "--option", option]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("inductor_mm_plugin compare: error: ") and message in err, err
    assert err.count("\n") == 1, err


def test_a_bad_option_fails_before_the_interpreter_rerun(tmp_path):
    # Without TRITON_INTERPRET on a CPU machine the command re-runs itself; a usage error
    # must come first, alone.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-m", "inductor_mm_plugin", "compare", TARGET, "--option", "unknown=1"],
                         capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert res.returncode == cli.EXIT_ERROR
    assert res.stderr.startswith("inductor_mm_plugin compare: error: unknown option 'unknown'"), res.stderr
    assert "re-running" not in res.stderr and "Traceback" not in res.stderr


def test_write_plan_and_rounds_reach_compare(monkeypatch, tmp_path):
    seen = {}

    class Passing:
        ok = True

        def __str__(self):
            return "verdict: PASS"

    def fake_compare(model, inputs, **kwargs):
        seen.update(kwargs)
        return Passing()

    monkeypatch.setattr("inductor_mm_plugin.comparison.compare", fake_compare)
    plan = str(tmp_path / "plan.json")
    assert cli.main(["compare", TARGET, "--quiet", "--write-plan", plan, "--rounds", "3", "--no-cudagraphs"]) == 0
    assert (seen["write_plan"], seen["rounds"], seen["cudagraphs"]) == (plan, 3, False)


def _plan(tmp_path, **fields):
    from inductor_mm_plugin.inductor import plan_file

    data = {"format": plan_file.FORMAT, "version": plan_file.FORMAT_VERSION, "model": "MLP",
            "setup": plan_file.setup(), "sites": [], **fields}  # fmt: skip
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data) if fields.get("setup") != "deep" else "[" * 100_000)
    return str(path)


@pytest.mark.parametrize("fields,message", [
    ({"setup": "cpu"}, "'setup' must be an object, got str"),  # was a 25-line AttributeError, exit 1
    ({"setup": "deep"}, "is not JSON"),  # was RecursionError
    ({"sites": [{"site": "forward|up|mm", "route": "false"}]}, "'route' must be true or false, got 'false'"),
])  # fmt: skip
def test_a_bad_plan_is_one_line_and_exit_2(no_compare, tmp_path, capsys, fields, message):
    plan = _plan(tmp_path, **fields)
    assert cli.main(["compare", TARGET, "--quiet", "--option", f"plan={plan}"]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith(f"inductor_mm_plugin compare: error: the routing plan {plan} ") and message in err, err
    assert err.count("\n") == 1, err


def test_a_plan_for_another_model_is_one_line_and_exit_2(tmp_path, capsys):
    """Found only when the model compiles (the plan has no site of it): one line still."""
    plan = _plan(tmp_path, sites=[{"site": "forward|other|mm|1x2 2x3|2,1 3,1|float32", "route": True}])
    target = tmp_path / "linear.py"
    target.write_text("import torch\ndef make():\n    return torch.nn.Linear(8, 4), (torch.randn(2, 8),)\n")
    args = ["compare", f"{target}:make", "--quiet", "--no-timing", "--option", f"plan={plan}"]
    assert cli.main(args) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("inductor_mm_plugin compare: error: ") and "written for another model" in err, err
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("flag", ["--rounds"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_rounds_below_one_is_a_usage_error(no_compare, capsys, flag, value):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["compare", TARGET, flag, value])
    assert exit_.value.code == cli.EXIT_ERROR
    assert f"argument {flag}: must be at least 1, got {value}" in capsys.readouterr().err


@pytest.mark.parametrize("kwargs", [{"rounds": 0}, {"reps": 0}, {"rounds": -1}, {"warmup": -1}, {"reps": 1.5}])
def test_compare_checks_rounds_and_reps_before_compiling(monkeypatch, kwargs):
    from inductor_mm_plugin.comparison import compare

    def must_not_compile(*args, **kw):
        raise AssertionError("compare compiled before checking its arguments")

    monkeypatch.setattr(torch, "compile", must_not_compile)
    name, value = next(iter(kwargs.items()))
    least = 0 if name == "warmup" else 1
    with pytest.raises(ValueError, match=f"compare: {name} must be an int >= {least}, got {value!r}"):
        compare(torch.nn.Linear(4, 4), (torch.randn(2, 4),), **kwargs)


@pytest.mark.parametrize("where", ["factory", "module", "forward"])
def test_a_target_calling_sys_exit_is_a_clear_error(tmp_path, capsys, where):
    body = {
        "factory": "import sys\ndef make():\n    sys.exit(0)\n",
        "module": "import sys\nsys.exit(0)\n",
        "forward": "import sys, torch\nclass M(torch.nn.Linear):\n    def forward(self, x):\n        sys.exit(0)\n"
                   "def make():\n    return M(4, 4), (torch.randn(2, 4),)\n",
    }[where]  # fmt: skip
    target = tmp_path / "exits.py"
    target.write_text(body)
    assert cli.main(["compare", f"{target}:make", "--quiet", "--no-timing"]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("inductor_mm_plugin compare: error: ") and "called sys.exit(0)" in err, err
    assert err.count("\n") == 1, err


def test_a_failing_comparison_leaves_no_cache_folder_and_no_torch_warning(tmp_path, capfd, monkeypatch):
    """torch's fresh cache keeps its folder on an error and says "temporary cache dir kept
    at": a failing comparison must print its own line only, and leave nothing behind."""
    import logging
    import tempfile

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("torch._inductor.utils").addHandler(handler)
    from inductor_mm_plugin.inductor import lowering

    def broken(*args, **kwargs):
        raise ValueError("not when compiled")

    monkeypatch.setattr(lowering, "addmm_launch", broken)  # the plugin arm fails as it runs
    target = tmp_path / "linear.py"
    target.write_text("import torch\ndef make():\n    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)\n")
    try:
        assert cli.main(["compare", f"{target}:make", "--quiet", "--no-timing"]) == cli.EXIT_ERROR
    finally:
        logging.getLogger("torch._inductor.utils").removeHandler(handler)
    err = capfd.readouterr().err
    assert "does not compile or run under torch.compile: ValueError: not when compiled" in err, err
    assert "kept at" not in err and not any("kept at" in r.getMessage() for r in records)
    assert err.count("\n") == 1, err
    assert list(temp.iterdir()) == []
