"""``inductor-mm-plugin compare FILE.py:FACTORY`` (or ``python -m inductor_mm_plugin compare ...``):
the A/B comparison from a shell.

FACTORY (in a file, or ``package.module:FACTORY``) is a function returning
``(model, example_inputs)``. On a machine without CUDA the command re-runs itself once with
TRITON_INTERPRET=1, which must be set before the plugin's kernels are defined.

Everything that can be checked without the model is checked before anything compiles: the
``--select`` value, each ``--option`` key and value, and that each output path can be
written (and matplotlib for ``--plot``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import pathlib
import sys

EXIT_OK, EXIT_NUMERICS, EXIT_ERROR = 0, 1, 2

EXIT_CODES = """exit status:
  0  the comparison ran (and with --strict, its numerics passed)
  1  the numerics failed, with --strict
  2  usage error (bad arguments, --select or --option values, an output path that cannot be
     written; checked before anything compiles), or the comparison could not be made (a
     target that does not load, a failing factory, a model without matmuls or that does not
     compile or run)
"""


def _fail(message: str) -> int:
    print(f"inductor_mm_plugin compare: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def _one_line(error: BaseException) -> str:
    """A user error's message on one line: a routing plan's own message where a PlanError is
    among the error's causes (Inductor wraps what a compile raises, adding lines of advice),
    else the message's first line."""
    from .inductor.plan_file import PlanError

    seen, cause = set(), error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, PlanError):
            return str(cause).removeprefix("inductor_mm_plugin: ")
        seen.add(id(cause))
        cause = getattr(cause, "inner_exception", None) or cause.__cause__ or cause.__context__
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def load_factory(target: str):
    """``path/to/file.py:make`` or ``package.module:make`` -> the callable."""
    if ":" not in target:
        raise ValueError(f"expected FILE.py:FACTORY or package.module:FACTORY, got {target!r}")
    where, name = target.rsplit(":", 1)
    if where.endswith(".py") or os.sep in where:
        path = pathlib.Path(where)
        if not path.is_file():
            raise ValueError(f"no such file: {where}")
        spec = importlib.util.spec_from_file_location(f"_ab_target_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ValueError(f"{where} has no callable {name!r}")
    return factory


def _at_least_one(text: str) -> int:
    """``--rounds``: an int of at least 1 (argparse reports the error as a usage error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _parse_value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _prog() -> str:
    """How the user ran the command, for usage lines: the console script or ``python -m``."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "inductor-mm-plugin" if name.startswith("inductor-mm-plugin") else "python -m inductor_mm_plugin"


def _version() -> str:
    import torch
    import triton

    from .version import __version__

    return f"inductor_mm_plugin {__version__} (torch {torch.__version__}, triton {triton.__version__})"


def build_parser() -> argparse.ArgumentParser:
    from .inductor.selection import SELECT_MODES

    p = argparse.ArgumentParser(prog=_prog(), description="inductor_mm_plugin tools", epilog=EXIT_CODES,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare", help="A/B: the plugin against stock Inductor on the same captured graphs",
                       epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    c.add_argument("target", help="FILE.py:FACTORY or package.module:FACTORY returning (model, example_inputs)")
    c.add_argument("--select", default=None, choices=SELECT_MODES, help="which matmuls are routed (default: auto)")
    competing = c.add_mutually_exclusive_group()
    competing.add_argument("--compete", action="store_const", const=True, dest="compete",
                           help="let Inductor's autotuner pick among the plugin's templates, its kernel and aten at "
                                "every selected site (default 'auto': on CUDA, route a site only where the plugin's "
                                "kernel measured faster)")
    competing.add_argument("--no-compete", action="store_const", const=False, dest="compete",
                           help="run the plugin at every routed site, whatever Inductor's autotuner would pick")
    c.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a plugin option or Inductor config key, e.g. fuse_swiglu=auto or max_autotune=true "
                        "(repeatable)")  # fmt: skip
    c.add_argument("--json", metavar="PATH", help="write the report as JSON")
    c.add_argument("--markdown", metavar="PATH", help="write the report as markdown")
    c.add_argument("--plot", metavar="PATH", help="write a PNG of the speedups (needs matplotlib)")
    c.add_argument("--strict", action="store_true", help="exit 1 when the numerics fail")
    c.add_argument("--quiet", action="store_true", help="no progress on stderr")
    c.add_argument("--no-timing", action="store_true", help="numerics and the site table only")
    graphs = c.add_mutually_exclusive_group()
    graphs.add_argument("--cudagraphs", action="store_const", const=True, dest="cudagraphs",
                        help="time under CUDA graphs (the default on CUDA for inference)")
    graphs.add_argument("--no-cudagraphs", action="store_const", const=False, dest="cudagraphs",
                        help="time without CUDA graphs")
    c.add_argument("--rounds", type=_at_least_one, default=7, help="interleaved timing rounds (default 7)")
    c.add_argument("--write-plan", metavar="PATH",
                   help="write a routing plan (where the plugin won) for options={'plan': PATH}")
    c.add_argument("--train", action="store_true", default=None, help="force a backward pass")
    return p


class UsageError(ValueError):
    """A command line that cannot work, found before anything compiles."""


def check_output_path(flag: str, path: str) -> None:
    """Raise UsageError unless ``path`` can be written: its folder exists, it is not a folder,
    and a file can be created there (tried, then removed: permissions alone do not tell,
    e.g. for root or on a read-only file system)."""
    target = pathlib.Path(path)
    folder = target.parent
    if target.is_dir():
        raise UsageError(f"{flag} {path}: is a directory")
    if not folder.is_dir():
        raise UsageError(f"{flag} {path}: no such directory: {folder}")
    existed = target.exists()
    try:
        with open(target, "a"):
            pass
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot be written: {e.strerror or e}") from None
    if not existed:
        target.unlink()


def check_options(items: list[str], select: str | None, compete: bool | None) -> dict:
    """``--select``, ``--compete`` and the ``--option KEY=VALUE`` items as one validated
    options dict: unknown keys, bad plugin values and values of the wrong type for an
    Inductor config key (``options.split_options``, the one check) raise UsageError."""
    from .inductor import compat
    from .inductor.options import split_options

    options = {}
    if select:
        options["select"] = select
    if compete is not None:
        options["compete"] = compete
    for item in items:
        if "=" not in item:
            raise UsageError(f"--option expects KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        options[key] = _parse_value(value)
    types = compat.inductor_config_types()
    for key, value in options.items():
        # A whole number given for a float key means the float (the one type table,
        # options.check_inductor_option, rejects an int there).
        if types.get(key) is float and isinstance(value, int) and not isinstance(value, bool):
            options[key] = float(value)
    try:
        split_options(options, types)
    except (ValueError, TypeError) as e:
        raise UsageError(str(e).removeprefix("inductor_mm_plugin: ")) from None
    return options


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)

    try:
        options = check_options(args.option, args.select, args.compete)
        for flag in ("json", "markdown", "plot", "write_plan"):
            if getattr(args, flag):
                check_output_path(f"--{flag.replace('_', '-')}", getattr(args, flag))
        if args.plot and importlib.util.find_spec("matplotlib") is None:
            raise UsageError("--plot needs matplotlib: pip install matplotlib")
    except UsageError as e:
        return _fail(str(e))

    import torch

    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") in (None, "", "0"):
        if not args.quiet:
            print("no CUDA: re-running under Triton's interpreter (TRITON_INTERPRET=1)", file=sys.stderr)
        sys.stdout.flush()
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        os.execve(sys.executable, [sys.executable, "-m", "inductor_mm_plugin", *argv], env)

    from .comparison import CompareError, compare

    # The target's own code runs in this process: a sys.exit() in it is an error of the
    # target, not the command's exit status (exit 0 with no output, before).
    try:
        factory = load_factory(args.target)
    except SystemExit as e:
        return _fail(f"cannot load {args.target}: it called sys.exit({e.code!r}) as it was imported")
    except Exception as e:  # noqa: BLE001
        return _fail(f"cannot load {args.target}: {type(e).__name__}: {e}")
    try:
        made = factory()
        model, example_inputs = made
    except SystemExit as e:
        return _fail(f"the factory {args.target} called sys.exit({e.code!r}) instead of returning "
                     "(model, example_inputs)")  # fmt: skip
    except Exception as e:  # noqa: BLE001
        return _fail(f"the factory {args.target} failed: {type(e).__name__}: {e}")

    try:
        report = compare(model, example_inputs, options=options, train=args.train, timing=not args.no_timing,
                         cudagraphs=args.cudagraphs, rounds=args.rounds, quiet=args.quiet,
                         write_plan=args.write_plan)  # fmt: skip
    except SystemExit as e:
        return _fail(f"the model of {args.target} called sys.exit({e.code!r}) while it was compared")
    except (CompareError, ValueError, TypeError) as e:
        return _fail(_one_line(e))

    print(report)
    try:
        if args.json:
            report.to_json(args.json)
        if args.markdown:
            pathlib.Path(args.markdown).write_text(report.to_markdown())
        if args.plot:
            report.plot(args.plot)
    except (CompareError, OSError) as e:
        return _fail(f"writing the report failed: {e}")
    if args.strict and not report.ok:
        print("inductor_mm_plugin compare: numerics FAILED (--strict)", file=sys.stderr)
        return EXIT_NUMERICS
    return EXIT_OK
