"""``python -m inductor_mm_plugin compare FILE.py:FACTORY`` — the A/B comparison from a shell.

FACTORY (in a file, or ``package.module:FACTORY``) is a function returning
``(model, example_inputs)``. On a machine without CUDA the command re-runs itself once with
TRITON_INTERPRET=1, which must be set before the plugin's kernels are defined.

Exit status: 0 done (numerics may still have failed unless --strict), 1 a numerics failure
with --strict, 2 the comparison could not be made (bad target, failing factory, a model
without matmuls or that does not compile).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import pathlib
import sys

EXIT_NUMERICS, EXIT_ERROR = 1, 2


def _fail(message: str) -> int:
    print(f"inductor_mm_plugin compare: error: {message}", file=sys.stderr)
    return EXIT_ERROR


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


def _parse_value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m inductor_mm_plugin", description="inductor_mm_plugin tools")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare", help="A/B: the plugin against stock Inductor on the same captured graphs")
    c.add_argument("target", help="FILE.py:FACTORY or package.module:FACTORY returning (model, example_inputs)")
    c.add_argument("--select", default=None, help="auto (default), all or opted_in")
    competing = c.add_mutually_exclusive_group()
    competing.add_argument("--compete", action="store_const", const=True, dest="compete",
                           help="let Inductor pick plugin or aten at every routed site (default: on CUDA, "
                                "where the plugin would take its slower kernel or nothing fuses into the site)")
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
    c.add_argument("--cudagraphs", action="store_true", help="time under CUDA graphs")
    c.add_argument("--train", action="store_true", default=None, help="force a backward pass")
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)

    import torch

    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") in (None, "", "0"):
        if not args.quiet:
            print("no CUDA: re-running under Triton's interpreter (TRITON_INTERPRET=1)", file=sys.stderr)
        sys.stdout.flush()
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        os.execve(sys.executable, [sys.executable, "-m", "inductor_mm_plugin", *argv], env)

    from .comparison import CompareError, compare

    options = {}
    if args.select:
        options["select"] = args.select
    if args.compete is not None:
        options["compete"] = args.compete
    for item in args.option:
        if "=" not in item:
            return _fail(f"--option expects KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        options[key] = _parse_value(value)

    try:
        factory = load_factory(args.target)
    except Exception as e:  # noqa: BLE001
        return _fail(f"cannot load {args.target}: {type(e).__name__}: {e}")
    try:
        made = factory()
        model, example_inputs = made
    except Exception as e:  # noqa: BLE001
        return _fail(f"the factory {args.target} failed: {type(e).__name__}: {e}")

    try:
        report = compare(model, example_inputs, options=options, train=args.train, timing=not args.no_timing,
                         cudagraphs=args.cudagraphs, quiet=args.quiet)  # fmt: skip
    except (CompareError, ValueError, TypeError) as e:
        return _fail(str(e))

    print(report)
    if args.json:
        report.to_json(args.json)
    if args.markdown:
        pathlib.Path(args.markdown).write_text(report.to_markdown())
    if args.plot:
        try:
            report.plot(args.plot)
        except CompareError as e:
            return _fail(str(e))
    if args.strict and not report.ok:
        print("inductor_mm_plugin compare: numerics FAILED (--strict)", file=sys.stderr)
        return EXIT_NUMERICS
    return 0
