"""Before/after A/B: the same benchmark rows timed for two versions of the package in ONE
process, in interleaved rounds, so that "the change cost no speed" is a measurement.

    python bench/ab.py --base 0ceed64 --out DIR                     # base commit against this tree
    python bench/ab.py --base 0ceed64 --head 1a2b3c4 --suite mm     # two commits
    python bench/ab.py --export 0ceed64 .ab/base                    # snapshot a commit (no GPU)
    python bench/ab.py --base .ab/base --suite all --out DIR        # ... and A/B it where git is absent

Suites: ``mm``: bench_mm.py's classes (``--classes``, default llm and skinny; ``--dtypes``,
default bf16; both layouts), the op of each version and torch.mm, plus the head's op a
second time (``head_again``: an A/A pair, the noise floor of the same code in the same
rounds). ``epilogue``: bench_epilogue.py's fused-epilogue blocks (``--quick``: its quick set)
compiled by each version's backend (``--with-stock``: and stock Inductor; ``--forced``: each
backend with compete=False, so every site runs the template with its epilogue fused), each
checked against eager.

Two versions in one process. Both register ``torch.library`` ops, Inductor templates and
lowerings under the name ``inductor_mm_plugin``, so a second import of the same package
would clash (``Library("inductor_mm_plugin", "DEF")`` twice is an error, and a template of an
existing name is reused, not replaced). So a version other than this working tree is copied
(``git archive REF inductor_mm_plugin``, or a folder holding an ``inductor_mm_plugin/``
snapshot) into a temporary folder with every occurrence of ``inductor_mm_plugin`` in its
files rewritten to ``inductor_mm_plugin_base`` (or ``_head``): its own import paths, op
namespace (``torch.ops.inductor_mm_plugin_base.mm``), template names, logger names and cache
folder names. It is imported from there as a package of that name; its backend is passed to
``torch.compile`` as a function. A copy of the same source compiles to the same Triton
kernels (Triton's cache keys on the source), so nothing else differs. What it cannot
separate: process-wide state of torch and Triton (allocator, compile workers), which both
versions share, as they share the GPU's clock state; the A/A pair measures what that leaves.

Method: every output checked against float64 (mm) or eager (epilogue) before timing; the
arms timed in ``--rounds`` rounds (default 5), the order reversed each round
(``_timing.rounds``); decode rows under CUDA graphs (``_timing.GraphTimer``), the others with
``do_bench`` (L2 flushed); ratio = base ms / head ms within a round, the median over rounds
(above 1: the head is faster). Per class it prints the geomean ratio and the A/A pair's, and
calls the difference "within noise" when the geomean ratio is within max(1%, 2 x the A/A
rows' median deviation) of 1.

Appends rows to ``<out>/ab.jsonl``: date, commit (the head's), gpu, torch, triton, suite,
base, head, class or block, M, N, K, dtype, layout, base_ms, head_ms, cublas_ms or stock_ms,
ratio, ratio_rounds, aa (head / head_again), base_config, head_config.
"""

from __future__ import annotations

import argparse
import importlib
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

import torch
from _timing import (
    REPO, GraphTimer, add_common_args, append_jsonl, config_name, dtype_of, geomean, make_operands, matmul_error,
    median, plugin_runtime, precompile, ratios, require_cuda, rounds, run_meta, spread, time_ms,
)  # fmt: skip

PACKAGE = "inductor_mm_plugin"


# --------------------------------------------------------------------- loading a version


def export(ref: str, dest: pathlib.Path) -> str:
    """Write ``ref``'s ``inductor_mm_plugin/`` under ``dest`` (and its commit to ``dest/.commit``)."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", ref], capture_output=True, text=True,
                            check=True).stdout.strip()  # fmt: skip
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit, PACKAGE],
                             capture_output=True, check=True).stdout  # fmt: skip
    with tempfile.TemporaryFile() as f:
        f.write(archive)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(dest, filter="data")
    (dest / ".commit").write_text(commit + "\n")
    return commit


def _source(ref: str, scratch: pathlib.Path) -> tuple[pathlib.Path, str]:
    """(folder holding ``inductor_mm_plugin/``, commit label) for a folder or a git ref."""
    path = pathlib.Path(ref)
    if (path / PACKAGE).is_dir():
        label = (path / ".commit").read_text().strip() if (path / ".commit").exists() else str(path)
        return path, label
    dest = scratch / f"export-{ref.replace('/', '_')}"
    try:
        return dest, export(ref, dest)
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        sys.exit(f"ab.py: cannot export {ref!r} with git here ({e}); where the repository's history is, run "
                 f"`python bench/ab.py --export {ref} .ab/base`, bring .ab/base along and pass --base .ab/base")


def load_version(ref: str, alias: str, scratch: pathlib.Path):
    """Import version ``ref`` as package ``alias`` (module docstring): returns (module, label)."""
    src, label = _source(ref, scratch)
    root = scratch / "versions"
    dst = root / alias
    if dst.exists():
        shutil.rmtree(dst)
    for path in sorted((src / PACKAGE).rglob("*")):
        if "__pycache__" in path.parts or path.is_dir():
            continue
        target = dst / path.relative_to(src / PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            target.write_text(path.read_text().replace(PACKAGE, alias))
        except UnicodeDecodeError:
            shutil.copyfile(path, target)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module(alias), label


def _worker_init(root: str) -> None:
    sys.path.insert(0, root)


def _compile_mm(task):
    """Worker: compile one version's heuristic kernel for one row (no launch)."""
    alias, (M, N, K), dtype_name, layout = task
    pkg = importlib.import_module(alias)
    a, b = make_operands(M, N, K, dtype_of(dtype_name), layout, fill=False)
    out = torch.empty(M, N, device="cuda", dtype=a.dtype)
    try:
        plugin_runtime(pkg).launch(a, b, out, compile_only=True)
    except Exception as e:  # noqa: BLE001 (the timed run compiles again and reports it)
        return f"{alias} {M}x{N}x{K} {layout}: {type(e).__name__}: {str(e)[:200]}"
    return None


def _backend(pkg):
    return importlib.import_module(pkg.__name__ + ".inductor.backend").backend


# ----------------------------------------------------------------------------- suites


def mm_rows(classes, dtypes):
    from bench_mm import SHAPES

    return [(cls, shape, dtype, layout) for cls in classes for dtype in dtypes for layout in ("row", "linear")
            for shape in SHAPES[cls]]  # fmt: skip


def bench_mm_row(row, versions: dict, n_rounds: int) -> dict:
    cls, (M, N, K), dtype_name, layout = row
    a, b = make_operands(M, N, K, dtype_of(dtype_name), layout)
    fns = {"cublas": lambda: torch.mm(a, b)}
    configs = {}
    for arm, pkg in versions.items():
        op = getattr(torch.ops, pkg.__name__).mm
        err = matmul_error(op(a, b), a, b)
        if err:
            raise AssertionError(f"{arm} ({pkg.__name__}) {M}x{N}x{K} {dtype_name} {layout}: {err}")
        fns[arm] = lambda op=op: op(a, b)
        configs[arm] = config_name(plugin_runtime(pkg).chosen_config(a, b))
    fns["head_again"] = fns["head"]  # the same callable: an A/A pair
    cudagraph = cls == "skinny"
    if cudagraph:
        timers = {arm: GraphTimer(fn, target_ms=5.0) for arm, fn in fns.items()}
        times = rounds(timers, lambda timer: timer(), n_rounds)
    else:
        times = rounds(fns, lambda fn: time_ms(fn, warmup=10, rep=50), n_rounds)
    rs = ratios(times, "base", "head")
    return dict(suite="mm", **{"class": cls}, M=M, N=N, K=K, dtype=dtype_name, layout=layout,
                timing="cudagraph" if cudagraph else "do_bench", cublas_ms=median(times["cublas"]),
                base_ms=median(times["base"]), head_ms=median(times["head"]), ratio=median(rs),
                ratio_rounds=[round(r, 4) for r in rs], aa=median(ratios(times, "head", "head_again")),
                base_vs_cublas=median(ratios(times, "cublas", "base")),
                head_vs_cublas=median(ratios(times, "cublas", "head")),
                base_config=configs["base"], head_config=configs["head"])  # fmt: skip


def bench_epilogue_rows(versions: dict, quick: bool, with_stock: bool, n_rounds: int, block: bool,
                        forced: bool = False):  # fmt: skip
    import bench_epilogue as ep

    arms = epilogue_arms(versions, with_stock, forced)
    blocks = list(ep.suite(quick))
    for name, m, d, f, k, make in blocks:
        torch.manual_seed(0)
        model = ep.init_(make())
        x = torch.randn(m, d, device="cuda", dtype=ep.DT)
        yield _epilogue_row(ep, name, model, x, arms, n_rounds, dict(M=m, hidden=d, ffn=f, K=k))
        del model, x
    if block:
        import transformer_block

        model, (x,) = transformer_block.make()
        yield _epilogue_row(ep, "transformer block 8x2048 d4096", model, x, arms, n_rounds,
                            dict(M=16384, hidden=4096, ffn=14336, K=4096))  # fmt: skip


def epilogue_arms(versions: dict, with_stock: bool, forced: bool) -> dict[str, dict]:
    """Each arm's ``torch.compile`` keyword arguments: each version's backend (``forced``: with
    compete=False, every site routed and its epilogue fused into the template), and stock."""
    import bench_epilogue as ep

    options = dict(options=ep.FORCED) if forced else {}
    arms = {arm: dict(backend=_backend(pkg), **options) for arm, pkg in versions.items()}
    if with_stock:
        arms["stock"] = {}
    return arms


def _epilogue_row(ep, name, model, x, arms, n_rounds, shape):
    """One block's row: each arm (``torch.compile`` keyword arguments) compiles ``model``."""
    compiled = {arm: (torch.compile(model, **kwargs), model) for arm, kwargs in arms.items()}
    times, compile_s, err = ep.time_arms(name, x, compiled, n_rounds)
    rs = ratios(times, "base", "head")
    row = dict(suite="epilogue", block=name, **shape, base_ms=median(times["base"]), head_ms=median(times["head"]),
               ratio=median(rs), ratio_rounds=[round(r, 4) for r in rs], base_err=err["base"], head_err=err["head"],
               base_compile_s=compile_s["base"], head_compile_s=compile_s["head"])  # fmt: skip
    if "stock" in times:
        row.update(stock_ms=median(times["stock"]), base_speedup=median(ratios(times, "stock", "base")),
                   head_speedup=median(ratios(times, "stock", "head")))  # fmt: skip
    return row


# ---------------------------------------------------------------------------- report


def verdict(rows: list[dict]) -> str:
    """The geomean base/head ratio and whether it is within the noise the A/A pairs show."""
    g = geomean([r["ratio"] for r in rows])
    aa = [abs(r["aa"] - 1) for r in rows if r.get("aa")]
    noise = max(0.01, 2 * median(aa)) if aa else 0.01
    within = abs(g - 1) <= noise
    aa_text = f", A/A geomean {geomean([r['aa'] for r in rows if r.get('aa')]):.4f}" if aa else ""
    return (f"geomean base/head {g:.4f} over {len(rows)} rows (lowest {min(r['ratio'] for r in rows):.3f}, highest "
            f"{max(r['ratio'] for r in rows):.3f}){aa_text}: {'within' if within else 'OUTSIDE'} noise "
            f"(+-{100 * noise:.1f}%)")  # fmt: skip


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", help="git ref, or a folder holding an inductor_mm_plugin/ snapshot (--export)")
    p.add_argument("--head", default="worktree", help="'worktree' (this tree's package, default), a git ref or a folder")
    p.add_argument("--export", nargs=2, metavar=("REF", "DIR"), help="write REF's package to DIR and exit (no GPU)")
    p.add_argument("--suite", choices=["mm", "epilogue", "all"], default="mm")
    p.add_argument("--classes", nargs="+", default=["llm", "skinny"], help="mm suite: bench_mm.py classes")
    p.add_argument("--dtypes", nargs="+", default=["bf16"], choices=["bf16", "fp16"])
    p.add_argument("--quick", action="store_true", help="epilogue suite: bench_epilogue.py's --quick blocks")
    p.add_argument("--block", action="store_true", help="epilogue suite: also the transformer block")
    p.add_argument("--with-stock", action="store_true", help="epilogue suite: also stock Inductor")
    p.add_argument("--forced", action="store_true",
                   help="epilogue suite: both versions route every site, its epilogue fused into the template "
                        "(compete=False), where the default times the extern kernels")
    add_common_args(p, "ab.jsonl", rounds=5, jobs=True)
    args = p.parse_args(argv)
    if args.export:
        commit = export(args.export[0], pathlib.Path(args.export[1]))
        print(f"{args.export[0]} ({commit}) -> {args.export[1]}/{PACKAGE}")
        return
    if not args.base:
        p.error("--base is required (or --export)")
    require_cuda("ab.py")
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="ab-"))
    base, base_label = load_version(args.base, PACKAGE + "_base", scratch)
    if args.head == "worktree":
        head = importlib.import_module(PACKAGE)
        meta = run_meta(args.commit)
        head_label = meta["commit"]
    else:
        head, head_label = load_version(args.head, PACKAGE + "_head", scratch)
        meta = run_meta(args.commit or head_label)
    versions = {"base": base, "head": head}
    print(f"base {base_label} ({base.__file__}); head {head_label} ({head.__file__})", flush=True)
    jsonl = pathlib.Path(args.out) / "ab.jsonl"
    labels = dict(base=base_label, head=head_label)
    t0 = time.time()
    if args.suite in ("mm", "all"):
        rows_todo = mm_rows(args.classes, args.dtypes)
        tasks = [(pkg.__name__, shape, dtype, layout) for pkg in versions.values()
                 for _, shape, dtype, layout in rows_todo]  # fmt: skip
        for e in [e for e in precompile(tasks, _compile_mm, args.jobs, _worker_init, (str(scratch / "versions"),)) if e]:
            print("  compile error:", e, flush=True)
        done = []
        for row in rows_todo:
            r = dict(bench_mm_row(row, versions, args.rounds), **labels)
            done.append(r)
            append_jsonl(jsonl, [r], meta)
            print(f"{r['class']:7s} {r['M']:6d}x{r['N']:6d}x{r['K']:6d} {r['dtype']} {r['layout']:6s} base/head "
                  f"{r['ratio']:.3f} ({spread(r['ratio_rounds'], '.3f')})  A/A {r['aa']:.3f}  vs cuBLAS: base "
                  f"{r['base_vs_cublas']:.3f} head {r['head_vs_cublas']:.3f}  [{r['base_config']} | {r['head_config']}]",
                  flush=True)  # fmt: skip
        print()
        for cls in args.classes:
            for layout in ("row", "linear"):
                rs = [r for r in done if r["class"] == cls and r["layout"] == layout]
                if rs:
                    print(f"mm {cls}/{layout}: {verdict(rs)}")
    if args.suite in ("epilogue", "all"):
        done = []
        for r in bench_epilogue_rows(versions, args.quick, args.with_stock, args.rounds, args.block, args.forced):
            r = dict(r, **labels)
            done.append(r)
            append_jsonl(jsonl, [r], meta)
            print(f"{r['block']:32s} M={r['M']:5d} d={r['hidden']:5d} f={r['ffn']:5d}  base {r['base_ms']:.3f} ms  head "
                  f"{r['head_ms']:.3f} ms  base/head {r['ratio']:.3f} ({spread(r['ratio_rounds'], '.3f')})",
                  flush=True)  # fmt: skip
        if done:
            print(f"\nepilogue: {verdict(done)}")
    print(f"\n{time.time() - t0:.0f}s; base {base_label}, head {head_label}; rows appended to {jsonl}")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
