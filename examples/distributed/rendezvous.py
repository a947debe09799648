"""The rendezvous of a distributed task with the standard library only.

Replica 0 listens on MASTER_ADDR:MASTER_PORT; every other replica connects and sends
its RANK; replica 0 answers each with the sum of all ranks once everyone is in, and
every replica checks that sum and WORLD_SIZE.  All of it comes from the variables the
platform sets per replica.
"""

from __future__ import annotations

import os
import socket
import sys
import time


def main() -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if world != int(os.environ["TASK_REPLICAS"]):
        print(f"rank {rank}: WORLD_SIZE {world} is not TASK_REPLICAS", flush=True)
        return 2
    want = world * (world - 1) // 2
    total = serve(addr, port, world) if rank == 0 else join(addr, port, rank)
    print(f"rank {rank} of {world}: sum of ranks {total} (want {want})", flush=True)
    return 0 if total == want else 3


def serve(addr: str, port: int, world: int) -> int:
    with socket.create_server((addr, port)) as server:
        peers = [server.accept()[0] for _ in range(world - 1)]
        total = sum(int(peer.recv(32).decode()) for peer in peers)
        for peer in peers:
            with peer:
                peer.sendall(str(total).encode())
    return total


def join(addr: str, port: int, rank: int, patience: float = 60.0) -> int:
    deadline = time.monotonic() + patience
    while True:
        try:
            with socket.create_connection((addr, port), timeout=5) as conn:
                conn.sendall(str(rank).encode())
                return int(conn.recv(32).decode())
        except (ConnectionRefusedError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
