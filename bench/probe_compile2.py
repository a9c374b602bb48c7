"""Probe: plugin vs stock compile, wall vs main-thread CPU vs process CPU vs GC time, live threads."""
import gc, os, sys, threading, time, json, resource
if "--cpu" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")
import torch
from models import Client
from _compiling import compile_once, warm_up_compilers

device = "cpu" if "--cpu" in sys.argv else "cuda"
names = [a for a in sys.argv[1:] if not a.startswith("--")] or ["llama-decode"]
gc_spent = [0.0, 0]
_t = [0.0]
def _cb(phase, info):
    if phase == "start":
        _t[0] = time.perf_counter()
    else:
        gc_spent[0] += time.perf_counter() - _t[0]
        gc_spent[1] += 1
gc.callbacks.append(_cb)

def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

def one(client, arm, cold):
    g0, n0 = gc_spent
    th0, pr0, ch0, w0 = time.thread_time(), time.process_time(), children_cpu(), time.perf_counter()
    s, phases = compile_once(client, arm, device, cold)
    d = dict(arm=arm, cold=cold, wall=round(time.perf_counter() - w0, 2), main_cpu=round(time.thread_time() - th0, 2),
             proc_cpu=round(time.process_time() - pr0, 2), children_cpu=round(children_cpu() - ch0, 2),
             gc_s=round(gc_spent[0] - g0, 2), gcs=gc_spent[1] - n0, threads=[t.name for t in threading.enumerate()],
             objs=len(gc.get_objects()), route=round(sum(v for k, v in phases.items() if k.startswith("routing.")), 2),
             inner=round(phases.get("compile_fx_inner", 0), 2), tracing=round(phases.get("bytecode_tracing", 0), 2))
    print(json.dumps(d), flush=True)
    return d

for name in names:
    torch._dynamo.reset()
    client = Client(name, device, tiny=device == "cpu")
    warm_up_compilers(device)
    for kind, n in (("cold", 1), ("warm", 3)):
        for rnd in range(n):
            for arm in (("stock", "plugin") if rnd % 2 == 0 else ("plugin", "stock")):
                print(name, kind, rnd, end=" ")
                one(client, arm, kind == "cold")
