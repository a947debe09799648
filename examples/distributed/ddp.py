"""PyTorch DDP through the variables the platform sets, and nothing else.

``torch.distributed.init_process_group("gloo")`` with no other argument takes the
``env://`` rendezvous: ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK`` and ``WORLD_SIZE``,
which taskenv sets in every replica of a task (one process per replica), or which
torchrun sets in each of its processes when started with no flags (``torchrun ddp.py``
reads taskenv's ``PET_*`` five; ``procs_per_replica`` above 1).  The same script runs
as a world of one, alone, unchanged.

Each process fits a tiny linear regression on data it makes itself, seeded by its rank
so the shards differ, for a few steps.  At every step it checks that DDP's gradient is
the average over the ranks of the gradients each rank computes alone, and at the end
that every rank holds the same weights.  It prints the task's own variables it read
(``LEARNING_RATE``, ``DATA_DIR``) and its ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``.

Exit codes: 0 all checks passed; 2 a variable it needs is not set; 3 a check failed
(a gradient not averaged, weights that differ, a world of the wrong size); 4 torch is
not installed for the Python that runs it.
"""

from __future__ import annotations

import os
import sys
import warnings

STEPS = 5
FEATURES = 4
SAMPLES = 64
NEEDS_VARIABLE, MISMATCH, NO_TORCH = 2, 3, 4


def say(line: str) -> None:
    """One line in one write: torchrun's processes share their replica's output, and with
    unbuffered output print's text and its newline are two writes another process's line
    can come between."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> int:
    try:
        # torch warns at import when numpy is absent; nothing here uses numpy.
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
    except ImportError:
        print(f"ddp.py: torch is missing from {sys.executable}, the Python this task's steps "
              f"run: install it for that Python ({sys.executable} -m pip install torch; the "
              "CPU build is enough: --index-url https://download.pytorch.org/whl/cpu) or run "
              "the task in an image with PyTorch", file=sys.stderr, flush=True)
        return NO_TORCH

    missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                 "LEARNING_RATE", "DATA_DIR") if name not in os.environ]
    if missing:
        hint = (" (with procs_per_replica above 1, start it under torchrun: torchrun ddp.py)"
                if "RANK" in missing else "")
        print(f"ddp.py: {', '.join(missing)} not set{hint}", file=sys.stderr, flush=True)
        return NEEDS_VARIABLE
    def flat(tensors: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([t.reshape(-1) for t in tensors])

    lr, data_dir = float(os.environ["LEARNING_RATE"]), os.environ["DATA_DIR"]
    local_rank = os.environ.get("LOCAL_RANK", "unset")

    dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    tag = f"rank {rank} of {world}"
    say(f"{tag}: RANK={os.environ['RANK']} WORLD_SIZE={os.environ['WORLD_SIZE']} "
        f"LOCAL_RANK={local_rank} LEARNING_RATE={lr} DATA_DIR={data_dir}")
    problems = []
    if (rank, world) != (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])):
        problems.append(f"the process group is {rank}/{world}, the env says "
                        f"{os.environ['RANK']}/{os.environ['WORLD_SIZE']}")
    if "TASK_REPLICAS" in os.environ:  # under taskenv: replicas x processes per replica
        want = int(os.environ["TASK_REPLICAS"]) * int(os.environ.get("PET_NPROC_PER_NODE", "1"))
        if world != want:
            problems.append(f"a world of {world}, not TASK_REPLICAS x PET_NPROC_PER_NODE "
                            f"= {want}")

    # This rank's shard, and its own initial weights (DDP broadcasts rank 0's).
    torch.manual_seed(rank)
    x = torch.randn(SAMPLES, FEATURES)
    y = x @ torch.arange(1.0, FEATURES + 1).unsqueeze(1) + 0.5 + 0.01 * torch.randn(SAMPLES, 1)
    model = DistributedDataParallel(torch.nn.Linear(FEATURES, 1))
    alone = torch.nn.Linear(FEATURES, 1)  # the same weights each step, no DDP: the local gradient
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = torch.nn.MSELoss()
    shards_differ = world == 1
    losses = []
    for step in range(STEPS):
        alone.load_state_dict(model.module.state_dict())
        loss_fn(alone(x), y).backward()
        local = flat([p.grad for p in alone.parameters()])
        alone.zero_grad()

        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()  # DDP all-reduces the gradients here
        averaged = flat([p.grad for p in model.parameters()])
        want = local.clone()
        dist.all_reduce(want)
        want /= world
        if not torch.allclose(averaged, want, rtol=1e-5, atol=1e-6):
            problems.append(f"step {step}: DDP's gradient {averaged.tolist()} is not the mean "
                            f"{want.tolist()} of the ranks' gradients")
        if not shards_differ:
            everyone = [torch.empty_like(local) for _ in range(world)]
            dist.all_gather(everyone, local)
            shards_differ = any(not torch.allclose(everyone[0], g) for g in everyone[1:])
        optimizer.step()
        losses.append(loss.item())
    if not shards_differ:
        problems.append("every rank computed the same gradient: the shards do not differ")

    weights = flat([p.detach() for p in model.parameters()])
    first = weights.clone()
    dist.broadcast(first, src=0)
    if not torch.equal(weights, first):
        problems.append(f"weights {weights.tolist()} differ from rank 0's {first.tolist()}")
    # Every rank past its last collective before any tears the group down: a rank that
    # destroys it while a peer's broadcast is still on the wire aborts that peer at exit.
    dist.barrier()
    dist.destroy_process_group()

    for problem in problems:
        say(f"{tag}: MISMATCH {problem}")
    if problems:
        return MISMATCH
    say(f"{tag}: OK {STEPS} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}, gradients "
        f"averaged over {world} ranks, weights equal on every rank "
        f"(checksum {weights.sum().item():.6f})")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Out without the interpreter's teardown: with torch 2.13 a process that has run a
    # gloo group now and then aborts there, after everything above has passed and been
    # printed ("terminate called without an active exception": a thread of torch's own
    # still joinable when its object is destroyed at exit), and torchrun then reports the
    # whole replica failed.  The verdict is the code main() returned.
    os._exit(code)
