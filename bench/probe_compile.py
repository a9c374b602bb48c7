"""Probe: where the plugin arm's compile time goes beyond stock's (cProfile diff per function)."""
import cProfile, io, os, pstats, sys, time, json
if "--cpu" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")
import torch
from models import Client
from _compiling import compile_once, warm_up_compilers

device = "cpu" if "--cpu" in sys.argv else "cuda"
out = os.environ.get("OUT", "/tmp/p")
names = [a for a in sys.argv[1:] if not a.startswith("--")] or ["llama-decode"]


def profiled(client, arm, cold):
    prof = cProfile.Profile()
    prof.enable()
    s, phases = compile_once(client, arm, device, cold)
    prof.disable()
    st = pstats.Stats(prof)
    cum = {}
    for (f, line, fn), (cc, nc, tt, ct, callers) in st.stats.items():
        key = f"{os.path.basename(f)}:{line}:{fn}"
        cum[key] = (cum.get(key, (0, 0, 0))[0] + ct, cum.get(key, (0, 0, 0))[1] + tt, nc)
    return s, phases, cum


def diff(ours, theirs, idx, n=45):
    rows = sorted(((v[idx] - theirs.get(k, (0, 0, 0))[idx], k, v[idx], v[2]) for k, v in ours.items()), reverse=True)
    return "\n".join(f"  {d:+7.3f}s  ours {o:7.3f}s  calls {c:7d}  {k}" for d, k, o, c in rows[:n])


for name in names:
    torch._dynamo.reset()
    client = Client(name, device, tiny=device == "cpu")
    warm_up_compilers(device)
    res = {}
    for kind in ("cold", "warm"):
        for rnd in range(2):
            for arm in (("stock", "plugin") if rnd % 2 == 0 else ("plugin", "stock")):
                s, phases, cum = profiled(client, arm, kind == "cold")
                res[(kind, arm, rnd)] = (s, phases, cum)
                print(f"{name} {kind} r{rnd} {arm}: {s:.2f}s", flush=True)
    for kind in ("cold", "warm"):
        p, st = res[(kind, "plugin", 1)], res[(kind, "stock", 1)]
        print(f"\n=== {name} {kind}: plugin {p[0]:.2f}s stock {st[0]:.2f}s (round 1; profiled)")
        print("phases plugin:", json.dumps({k: round(v, 2) for k, v in sorted(p[1].items(), key=lambda kv: -kv[1])[:14]}))
        print("phases stock: ", json.dumps({k: round(v, 2) for k, v in sorted(st[1].items(), key=lambda kv: -kv[1])[:14]}))
        print("-- cumulative, plugin minus stock")
        print(diff(p[2], st[2], 0))
        print("-- own time, plugin minus stock")
        print(diff(p[2], st[2], 1, 25))
