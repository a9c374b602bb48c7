"""One rank of the distributed tests (tests/test_distributed.py), run as its own process:

    python tests/distributed_worker.py SCENARIO[,SCENARIO...] RESULT_JSON

configured by the environment the launcher sets: RANK, WORLD_SIZE, MASTER_PORT, DIST_DEVICE
("cpu" with gloo, or "cuda" with NCCL), DIST_DTYPE, DIST_SEED; on the CPU TRITON_INTERPRET=1,
which must be set before Triton is imported. It writes what each scenario measured to
RESULT_JSON (or the traceback of what failed) and leaves the judging to the test.

Scenarios, each training with the plugin's backend and with stock ``torch.compile`` side by
side, against a float64 eager reference of the same model on the whole (all ranks') batch:

* ``ddp``: ``torch.compile(DDP(model, bucket_cap_mb=<one layer>))``; DDPOptimizer splits
  the graph at bucket boundaries (``Stack``: three buckets);
* ``ddp_unsplit``: the same with ``torch._dynamo.config.optimize_ddp = False`` (one graph);
* ``ddp_container``: an ``nn.Sequential`` of the same layers, ``DDP(torch.compile(model))``
  (compiled from outside, DDP around a torch.nn container compiles nothing: issue 25);
* ``fsdp2``: ``fully_shard`` on each block and on the root, then ``torch.compile``;
* ``compare``: ``inductor_mm_plugin.compare`` must refuse DDP (compiled or not) and FSDP2 models.
"""

import os
import sys

if os.environ.get("DIST_DEVICE", "cpu") == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

import contextlib  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import traceback  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from integration_utils import count_calls, no_graph_caches  # noqa: E402

STEPS = 3
LR = 0.05
BATCH = 8  # rows per rank


class Stack(nn.Module):
    """Three bias-free Linear layers, GELU between (see Block). DDP's buckets are sized to one
    layer's weight (``bucket_bytes``), so compiled DDP splits the graph in three, one per layer."""

    def __init__(self, dtype, device, d=32, f=64):
        super().__init__()
        kw = dict(bias=False, dtype=dtype, device=device)
        self.l0, self.l1, self.l2 = nn.Linear(d, f, **kw), nn.Linear(f, d, **kw), nn.Linear(d, f, **kw)
        self.d = d
        self.bucket_bytes = d * f * dtype.itemsize

    def forward(self, x):
        return self.l2(nn.functional.gelu(self.l1(nn.functional.gelu(self.l0(x)))))


class Block(nn.Module):
    """A residual MLP block: a class of the user's own, so Dynamo compiles its forward as a
    frame of its own once FSDP2's hooks split the model at each sharded block. GELU, not
    ReLU: in bf16 a ReLU whose input rounds across 0 flips a whole row of the next layer's
    gradient, which put either arm (stock too) 20% off float64 at random steps."""

    def __init__(self, dtype, device, d=32, f=64):
        super().__init__()
        kw = dict(bias=False, dtype=dtype, device=device)
        self.up, self.down = nn.Linear(d, f, **kw), nn.Linear(f, d, **kw)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(x)))


class Tower(nn.Module):
    def __init__(self, dtype, device, d=32):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dtype, device, d), Block(dtype, device, d)])
        self.head = nn.Linear(d, d, bias=False, dtype=dtype, device=device)
        self.d = d

    def forward(self, x):
        # No loop: a graph break inside a for loop makes Dynamo run the whole frame eagerly,
        # and each sharded block's call is a graph break (FSDP2's hooks).
        x = self.blocks[0](x)
        x = self.blocks[1](x)
        return self.head(x)


def rel_err(x, ref) -> float:
    """max |x - ref| / max |ref|, in float64."""
    x, ref = x.detach().double().cpu(), ref.detach().double().cpu()
    return float((x - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def full(t):
    """A whole tensor from a DTensor shard (FSDP2), or the tensor itself."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def at_parameters(reference: nn.Module, model: nn.Module) -> nn.Module:
    """A float64 copy of ``reference`` holding ``model``'s current parameters (whole)."""
    at = copy.deepcopy(reference)
    with torch.no_grad():
        for q, p in zip(at.parameters(), model.parameters()):
            q.copy_(full(p).detach().double().cpu())
            q.grad = None
    return at


def inputs(rank, world, d, dtype, device, seed, step):
    """Each rank's batch for a step, and the whole batch (every rank's, in rank order)."""
    batches = []
    for r in range(world):
        g = torch.Generator().manual_seed(seed * 1000 + step * 10 + r)
        batches.append(torch.randn(BATCH, d, generator=g, dtype=torch.float64))
    return batches[rank].to(device=device, dtype=dtype), torch.cat(batches)


PLUGIN = {"backend": "inductor_mm_plugin", "options": {"select": "all", "compete": False}}


def ddp(model, rank, device):
    from torch.nn.parallel import DistributedDataParallel as DDP

    # DDPOptimizer sizes its first bucket by torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
    # (1 MiB) and refuses a bucket_cap_mb below it: lower both, in this process only, so
    # that layers of a few KiB fill a bucket each.
    dist._DEFAULT_FIRST_BUCKET_BYTES = model.bucket_bytes
    return DDP(model, bucket_cap_mb=model.bucket_bytes / 2**20, device_ids=[rank] if device.type == "cuda" else None)


def wrap(scenario, model, compile_kwargs, rank, world, device):
    """The model wrapped and compiled as each scenario does it."""
    if scenario in ("ddp", "ddp_unsplit"):
        return torch.compile(ddp(model, rank, device), **compile_kwargs)
    if scenario == "ddp_container":
        # torch.compile(DDP(nn.Sequential)) compiles nothing (pytorch/pytorch#140416, see
        # compiled_outside below): a torch.nn container is compiled inside DDP instead.
        return ddp(torch.compile(model, **compile_kwargs), rank, device)  # reads bucket_bytes through
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    return torch.compile(fully_shard(model, mesh=mesh), **compile_kwargs)


def container(stack: Stack) -> nn.Sequential:
    """The same layers in a torch.nn container, whose forward Dynamo never compiles as a frame
    of its own."""
    seq = nn.Sequential(stack.l0, nn.GELU(), stack.l1, nn.GELU(), stack.l2)
    seq.d, seq.bucket_bytes = stack.d, stack.bucket_bytes
    return seq


def train(scenario, rank, world, device, dtype, seed):
    """Train three steps with each arm; return errors against float64, and what ran."""
    from torch._inductor.utils import run_and_get_code

    from inductor_mm_plugin.inductor.records import record_sites

    torch.manual_seed(seed)
    base = Tower(dtype, device) if scenario == "fsdp2" else Stack(dtype, device)
    if scenario == "ddp_container":
        base = container(base)
    reference = copy.deepcopy(base).to(device="cpu", dtype=torch.float64)
    arms = {"plugin": copy.deepcopy(base), "stock": copy.deepcopy(base)}
    compiled = {arm: wrap(scenario, model, PLUGIN if arm == "plugin" else {}, rank, world, device)
                for arm, model in arms.items()}  # fmt: skip
    optimizers = {arm: torch.optim.SGD(m.parameters(), lr=LR) for arm, m in arms.items()}
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=LR)
    result = {"loss": {"plugin": [], "stock": []}, "grad": {"plugin": [], "stock": []}, "param": {}}
    # optimize_ddp=False: Dynamo leaves the graph whole (DDP's own buckets, no split)
    unsplit = torch._dynamo.config.patch(optimize_ddp=False) if scenario == "ddp_unsplit" else contextlib.nullcontext()
    torch._dynamo.reset()
    for step in range(STEPS):
        x, whole = inputs(rank, world, base.d, dtype, device, seed, step)
        # The mean over the whole batch is what DDP's (and FSDP's) averaged gradients of each
        # rank's mean loss are the gradient of. The trajectory in float64, for the trained
        # parameters at the end:
        ref_optimizer.zero_grad()
        reference(whole).square().mean().backward()
        ref_optimizer.step()
        seen = whole.to(dtype).double()  # the batch as the arms see it, rounded to dtype
        for arm, model in compiled.items():
            # Each step's loss and gradients against float64 at the arm's own parameters and
            # inputs: this step's arithmetic alone, not the drift of earlier steps' roundings.
            at = at_parameters(reference, arms[arm])
            at(seen).square().mean().backward()
            ref_loss = at(seen[rank * BATCH:(rank + 1) * BATCH]).square().mean()
            optimizers[arm].zero_grad()

            def run():
                with unsplit:
                    loss = model(x).float().square().mean()
                    loss.backward()
                return loss

            if step == 0 and arm == "plugin":
                with record_sites() as records:
                    loss, codes = run_and_get_code(run)
                result["graphs"] = [count_calls([code]) for code in codes]
                result["sites"] = [(r.site.phase, r.site.module, r.routed, r.reason) for r in records]
                result["devices"] = sorted({r.site.device for r in records} | {str(loss.device)})
            else:
                loss = run()
            result["loss"][arm].append(rel_err(loss, ref_loss))
            grads = [full(p.grad) for p in arms[arm].parameters()]
            result["grad"][arm].append(max(rel_err(g, q.grad) for g, q in zip(grads, at.parameters())))
            optimizers[arm].step()
    for arm, model in arms.items():
        result["param"][arm] = max(rel_err(full(p), q) for p, q in zip(model.parameters(), reference.parameters()))
    if scenario == "ddp_container":
        # The root cause of issue 25: compiled from outside, DDP graph-breaks in its
        # _pre_forward (Logger.set_runtime_stats_and_log, untraceable) and runs eagerly, and
        # Dynamo never compiles a torch.nn module's forward (DDP's, the container's, Linear's)
        # as a frame of its own: no graph at all, with any backend.
        outside = torch.compile(ddp(copy.deepcopy(base), rank, device), **PLUGIN)
        torch._dynamo.reset()
        _, codes = run_and_get_code(lambda: outside(x).float().square().mean().backward())
        result["compiled_outside"] = len(codes)
    return result


def compare_refuses(rank, world, device, dtype, seed):
    """compare() on a DDP- and on an FSDP2-wrapped model: the CompareError it raises."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    import inductor_mm_plugin
    from inductor_mm_plugin.comparison import CompareError

    messages = {}
    x = torch.randn(BATCH, 32, device=device, dtype=dtype)
    model = Tower(dtype, device)
    wrapped = {"ddp": DDP(copy.deepcopy(model)), "compiled ddp": torch.compile(DDP(copy.deepcopy(model)))}
    mesh = init_device_mesh(device.type, (world,))
    wrapped["fsdp2"] = fully_shard(copy.deepcopy(model), mesh=mesh)
    blocks = copy.deepcopy(model)
    fully_shard(blocks.blocks[1], mesh=mesh)  # only a block is sharded: the root is a plain module
    wrapped["fsdp2 blocks"] = blocks
    for name, m in wrapped.items():
        try:
            inductor_mm_plugin.compare(m, (x,))
            messages[name] = None
        except CompareError as e:
            messages[name] = str(e)
    return messages


def main(scenarios, out_path):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device_type = os.environ.get("DIST_DEVICE", "cpu")
    dtype = getattr(torch, os.environ.get("DIST_DTYPE", "float32"))
    seed = int(os.environ.get("DIST_SEED", "0"))
    if device_type == "cuda":
        torch.cuda.set_device(rank)  # each rank on its own GPU; the launchers guard on the tensors' device
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    init = f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}"
    dist.init_process_group("nccl" if device_type == "cuda" else "gloo", init_method=init, rank=rank, world_size=world)
    results = {}
    with no_graph_caches():  # the routing pass must run on every graph (count_calls, sites)
        for scenario in scenarios:
            try:
                if scenario == "compare":
                    results[scenario] = {"messages": compare_refuses(rank, world, device, dtype, seed)}
                else:
                    results[scenario] = train(scenario, rank, world, device, dtype, seed)
            except Exception:  # noqa: BLE001  (reported to the test, which fails with it)
                results[scenario] = {"error": traceback.format_exc()}
    with open(out_path, "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1].split(","), sys.argv[2])
