"""``make bench``: taskenv's pipeline against the engine's own floor, in one run.

Starts its own redis-server (a fresh directory), then:

1. in-process: validation + merge time for 10 ... 10,000 variables, and
   taskenv's own code per task without Celery or HTTP (``bench/stagecost.py``);
2. POST throughput with no worker running: a no-op Flask JSON endpoint, the same
   plus one Redis write and one Celery ``send_task`` (``bench/noop_api.py``, both
   under waitress threads=8), and ``POST /api/v1/tasks`` (``python -m api``);
3. the bare three-hop Celery pipeline (``bench/baseline_app.py``, taskenv's worker
   settings) and taskenv's (``TASKENV_LAUNCHER=dryrun``), one worker per queue
   each, taking turns: bursts (best of ``--rounds``), then paced loads at
   fractions of the bare pipeline's throughput;
4. ``GET /api/v1/tasks?limit=50`` at 1,000 and 100,000 stored tasks, and Redis
   memory per stored task.

Results: ``bench/results/latest.json`` (and a timestamped copy), a plot of
latency against offered load (``bench/results/latency-vs-load.png``) and, on
stdout, the table and each target as MET or MISSED.  Every process it starts is
stopped before it exits.  ``--quick`` makes a short run; ``--help`` lists the rest.
See docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench import growth, report  # noqa: E402
from bench.measure import (  # noqa: E402
    CpuMeter,
    RedisCounter,
    SenderFactory,
    Submitted,
    http_poster,
    submit,
    summarize,
    wait_until,
)
from shared import states  # noqa: E402
from shared.store import Keys  # noqa: E402
from shared.tokens import PREFIX as TOKEN_PREFIX  # noqa: E402
from workers.celery_app import QUEUES  # noqa: E402
from workers.localstack import (  # noqa: E402
    RedisServer,
    free_port,
    start_api,
    start_worker,
    stop_all,
    wait_http,
)

RESULTS = ROOT / "bench" / "results"
FINAL_STATES = (states.SUCCEEDED, states.FAILED, states.REJECTED)
TASK_PREFIX = "taskenv"
GROWTH_PREFIX = "growth"
POST_PREFIX = "postonly"
BASELINE_PREFIX = "bench"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--tasks", type=int, default=2000,
                   help="tasks (and baseline pipelines, and POSTs) per saturation phase")
    p.add_argument("--quick", action="store_true",
                   help="a short run: 300 tasks, one round, 3 s per paced point, "
                        "20,000 stored tasks")
    p.add_argument("--rounds", type=int, default=2,
                   help="rounds of each saturation phase; the fastest round is reported")
    p.add_argument("--pool", default="prefork", help="Celery pool of every worker")
    p.add_argument("--concurrency", type=int, default=2, help="Celery concurrency per worker")
    p.add_argument("--threads", type=int, default=8, help="client threads")
    p.add_argument("--rates", default="0.25,0.5,0.75,1.0",
                   help="paced loads, as fractions of the baseline's throughput")
    p.add_argument("--paced-seconds", type=float, default=8.0,
                   help="how long each paced load is offered")
    p.add_argument("--p99-at", type=float, default=0.5,
                   help="the paced load (fraction) at which the p99 target is judged")
    p.add_argument("--stored", type=int, default=100_000,
                   help="stored tasks for the large listing measurement")
    p.add_argument("--profile", action="store_true",
                   help="after the measurements, run one more burst under py-spy "
                        "(API and workers) and summarise where the time goes")
    p.add_argument("--out", type=Path, default=RESULTS, help="where results are written")
    args = p.parse_args(argv)
    if args.quick:
        args.tasks = min(args.tasks, 300)
        args.rounds = 1
        args.paced_seconds = min(args.paced_seconds, 3.0)
        args.stored = min(args.stored, 20_000)
    args.rates = [float(r) for r in args.rates.split(",")]
    return args


def say(text: str = "") -> None:
    print(text, flush=True)


# --- the task every submission carries ------------------------------------------------------

def task_body() -> dict[str, Any]:
    """A realistic small task: two steps, ten user variables (two override defaults)."""
    return {"name": "bench", "steps": [["sh", "prepare.sh"], ["python3", "train.py"]],
            "env": growth.user_env(10)}


# --- processes ------------------------------------------------------------------------------

class Processes:
    """Everything the run starts, so that everything is stopped however it ends."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.logs = work / "processes.log"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.redis: RedisServer | None = None

    def add(self, proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        self.procs.append(proc)
        return proc

    def spawn(self, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Like workers.localstack's: own session, output to the log, from the repo root."""
        with open(self.logs, "ab") as out:
            return self.add(subprocess.Popen(args, env={**os.environ, **env,
                                                        "PYTHONUNBUFFERED": "1"},
                                             cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                             start_new_session=True))

    def stop(self, procs: list[subprocess.Popen[bytes]]) -> None:
        stop_all(procs)
        for proc in procs:
            if proc in self.procs:
                self.procs.remove(proc)

    def stop_everything(self) -> None:
        stop_all(self.procs)
        self.procs.clear()
        if self.redis:
            self.redis.stop()
            self.redis = None


def baseline_worker(procs: Processes, queue: str, env: dict[str, str],
                    args: argparse.Namespace) -> subprocess.Popen[bytes]:
    """The same command line as workers.localstack.start_worker, with the baseline's app."""
    return procs.spawn([sys.executable, "-m", "celery", "-A", "bench.baseline_app", "worker",
                        "-Q", queue, "-n", f"{queue}-{os.getpid()}-{time.monotonic_ns()}@%h",
                        "-c", str(args.concurrency), "-P", args.pool, "-l", "INFO",
                        "--without-gossip", "--without-mingle", "--without-heartbeat"], env)


# --- one measured load ----------------------------------------------------------------------

def measured(name: str, sender: SenderFactory, count: int, threads: int,
             finished: Callable[[], int], already: int, timeout: float,
             counter: RedisCounter, cpu: CpuMeter, rate: float | None = None) -> dict[str, Any]:
    """Submit ``count`` items and wait until the finished count has grown by ``count``."""
    counter.reset()
    cpu.start()
    started = time.perf_counter()
    sub = submit(sender, count, threads, rate)
    complete = wait_until(finished, already + len(sub.ids), timeout)
    wall = time.perf_counter() - started
    out = {"name": name, "count": count, "accepted": len(sub.ids), "errors": sub.errors,
           "complete": complete, "wall_seconds": wall,
           "offered_rate": rate, "submit_rate": sub.rate,
           "submit_response_ms": _ms(summarize(sub.response_seconds)),
           "cpu": cpu.stop(max(1, len(sub.ids))),
           "redis_commands": counter.snapshot(max(1, len(sub.ids)))}
    out["_sub"] = sub
    return out


def _ms(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: (v * 1e3 if k != "n" else v) for k, v in summary.items()}


def latency_report(sub: Submitted, marks: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Latency from the client's submit time to each mark, throughput to the last mark."""
    out: dict[str, Any] = {}
    for mark, times in marks.items():
        lat = [times[i] - t for i, t in zip(sub.ids, sub.submitted_at, strict=True)
               if i in times]
        out[f"submit_to_{mark}_ms"] = _ms(summarize(lat))
        if times:
            out[f"throughput_to_{mark}"] = len(times) / (max(times.values()) - sub.first)
    return out


# --- the two pipelines ----------------------------------------------------------------------

class Baseline:
    """The bare three-hop pipeline: its workers, its sender, its completion marks."""

    def __init__(self, procs: Processes, redis_url: str, client: redis.Redis,
                 args: argparse.Namespace) -> None:
        os.environ["BENCH_REDIS_URL"] = redis_url
        os.environ["BENCH_KEY_PREFIX"] = BASELINE_PREFIX
        from bench import baseline_app

        self.mod, self.procs, self.client, self.args = baseline_app, procs, client, args
        self.app = baseline_app.make_app(redis_url, BASELINE_PREFIX)
        self.env = {"BENCH_REDIS_URL": redis_url, "BENCH_KEY_PREFIX": BASELINE_PREFIX}
        self.counter = RedisCounter(client)
        self.workers: list[subprocess.Popen[bytes]] = []

    def start_workers(self) -> None:
        self.workers = [baseline_worker(self.procs, q, self.env, self.args)
                        for q in self.mod.QUEUES]

    def stop_workers(self) -> None:
        self.procs.stop(self.workers)
        self.workers = []

    def cpu(self) -> CpuMeter:
        return CpuMeter({f"worker {q}": w.pid for q, w in zip(self.mod.QUEUES, self.workers,
                                                               strict=True)},
                        {"redis-server": self.procs.redis.proc.pid})  # type: ignore[union-attr]

    def sender(self, run: str) -> SenderFactory:
        def factory() -> Callable[[int], str]:
            def send(i: int) -> str:
                pid = f"{run}-{i}"
                self.app.send_task("bench.hop1", args=[pid, run], queue="hop1")
                return pid
            return send
        return factory

    def done(self, run: str) -> Callable[[], int]:
        return lambda: int(self.counter.call("HLEN", self.mod.done_key(run)))

    def warm_up(self) -> None:
        warm = submit(self.sender("warmup"), 30, 2)
        if not wait_until(self.done("warmup"), len(warm.ids), 90):
            raise RuntimeError(f"baseline workers did not come up; see {self.procs.logs}")

    def load(self, run: str, count: int, rate: float | None) -> dict[str, Any]:
        out = measured(run, self.sender(run), count, self.args.threads, self.done(run), 0,
                       max(60.0, count / 10), self.counter, self.cpu(), rate)
        raw = self.client.hgetall(self.mod.done_key(run))
        out.update(latency_report(out.pop("_sub"),
                                  {"last_hop": {_text(k): float(v) for k, v in raw.items()}}))
        out["throughput"] = out.get("throughput_to_last_hop", 0.0)
        out["latency_ms"] = out["submit_to_last_hop_ms"]
        return out

    def settings(self) -> dict[str, Any]:
        return self.mod.mirrored_settings(self.app)


class Taskenv:
    """The taskenv stack as the benchmark drives it."""

    def __init__(self, procs: Processes, redis_url: str, client: redis.Redis,
                 args: argparse.Namespace, prefix: str = TASK_PREFIX) -> None:
        self.procs, self.client, self.args = procs, client, args
        self.port = free_port()
        self.token = TOKEN_PREFIX + uuid.uuid4().hex
        self.env = {"TASKENV_REDIS_URL": redis_url, "TASKENV_LAUNCHER": "dryrun",
                    "TASKENV_PORT": str(self.port), "TASKENV_ADMIN_TOKEN": self.token,
                    "TASKENV_KEY_PREFIX": prefix,
                    "TASKENV_WORK_DIR": str(procs.work / "tasks")}
        self.keys = Keys(prefix)
        self.counter = RedisCounter(client)
        self.api: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []

    def start_api(self) -> None:
        self.api = self.procs.add(start_api(self.env, self.procs.logs))
        wait_http(f"http://127.0.0.1:{self.port}/healthz")
        self.put_policy()

    def start_workers(self) -> None:
        self.workers = [self.procs.add(start_worker(q, self.env, self.args.concurrency,
                                                    self.args.pool, self.procs.logs))
                        for q in QUEUES]

    def stop_workers(self) -> None:
        self.procs.stop(self.workers)
        self.workers = []

    def cpu(self) -> CpuMeter:
        groups = {"api": self.api.pid} if self.api else {}  # type: ignore[union-attr]
        groups.update({f"worker {q}": w.pid for q, w in zip(QUEUES, self.workers, strict=False)})
        return CpuMeter(groups, {"redis-server": self.procs.redis.proc.pid})  # type: ignore

    def put_policy(self) -> None:
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request("PUT", "/api/v1/policy", json.dumps(growth.policy_body()),
                     {"Authorization": f"Bearer {self.token}",
                      "Content-Type": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        if resp.status != 200:
            raise RuntimeError(f"PUT /api/v1/policy answered {resp.status}: {body[:300]!r}")

    def poster(self) -> SenderFactory:
        return http_poster(self.port, "/api/v1/tasks", task_body(), self.token, 202)

    def finished(self) -> int:
        return sum(int(self.counter.call("ZCARD", self.keys.index(state=s)))
                   for s in FINAL_STATES)

    def warm_up(self, backlog: int = 0) -> None:
        submit(self.poster(), 30, 2)
        if not wait_until(self.finished, backlog + 30, 120, interval=0.25):
            raise RuntimeError(f"taskenv workers did not come up; see {self.procs.logs}")

    def docs(self, ids: list[str]) -> list[dict[str, Any]]:
        out = []
        for start in range(0, len(ids), 500):
            pipe = self.client.pipeline(transaction=False)
            for task_id in ids[start:start + 500]:
                pipe.hget(self.keys.task(task_id), "doc")
            out += [json.loads(raw) for raw in pipe.execute() if raw is not None]
        return out

    def marks(self, ids: list[str]) -> tuple[dict[str, dict[str, float]], dict[str, int],
                                             dict[str, Any]]:
        """When each task reached each state (first event of revision 1), its final states,
        and the time spent between consecutive states."""
        wanted = (states.VALIDATED, states.RESOLVED, states.LAUNCHING, states.SUCCEEDED)
        marks: dict[str, dict[str, float]] = {s: {} for s in wanted}
        finals: dict[str, int] = {}
        gaps: dict[str, list[float]] = {}
        for doc in self.docs(ids):
            finals[doc["state"]] = finals.get(doc["state"], 0) + 1
            seen: dict[str, float] = {}
            for event in doc.get("events", []):
                if event["revision"] == 1:
                    seen.setdefault(event["state"], event["at"])
            for s in wanted:
                if s in seen:
                    marks[s][doc["id"]] = seen[s]
            chain = (states.PENDING, *wanted)
            for a, b in zip(chain, chain[1:], strict=False):
                if a in seen and b in seen:
                    gaps.setdefault(f"{a}->{b}", []).append(seen[b] - seen[a])
        stage_ms = {k: _ms(summarize(v)) for k, v in gaps.items()}
        return marks, finals, stage_ms

    def load(self, name: str, count: int, rate: float | None) -> dict[str, Any]:
        already = self.finished()
        out = measured(name, self.poster(), count, self.args.threads, self.finished, already,
                       max(90.0, count / 5), self.counter, self.cpu(), rate)
        sub = out.pop("_sub")
        marks, finals, stage_ms = self.marks(sub.ids)
        out.update(latency_report(sub, {"resolved": marks[states.RESOLVED],
                                        "launching": marks[states.LAUNCHING],
                                        "succeeded": marks[states.SUCCEEDED]}))
        out["final_states"] = finals
        out["between_states_ms"] = stage_ms
        # Throughput to the end of the last stage; latency to the start of the last stage,
        # which is where the baseline's third hop writes its timestamp.
        out["throughput"] = out.get("throughput_to_succeeded", 0.0)
        out["latency_ms"] = out["submit_to_launching_ms"]
        out["_ids"] = sub.ids
        return out


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def best(rounds: list[dict[str, Any]], key: str = "throughput") -> dict[str, Any]:
    """The least disturbed of several rounds on a shared machine: the fastest."""
    return max(rounds, key=lambda r: r[key])


# --- phases ---------------------------------------------------------------------------------

def phase_post(procs: Processes, redis_url: str, client: redis.Redis,
               args: argparse.Namespace) -> dict[str, Any]:
    """POST throughput, no worker running: taskenv's API against the no-op floors."""
    port = free_port()
    noop = procs.spawn([sys.executable, "-m", "bench.noop_api"],
                       {"BENCH_NOOP_PORT": str(port), "BENCH_REDIS_URL": redis_url})
    # Its own key prefix, so that nothing the API enqueues here is ever consumed.
    api = Taskenv(procs, redis_url, client, args, prefix=POST_PREFIX)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        api.start_api()
        kinds = {
            "noop": (http_poster(port, "/noop", task_body(), None, 202), noop.pid, None),
            "noop_enqueue": (http_poster(port, "/noop-enqueue", task_body(), None, 202),
                             noop.pid, None),
            "api": (api.poster(), api.api.pid, api.counter),  # type: ignore[union-attr]
        }
        for poster, _, _ in kinds.values():
            submit(poster, 100, args.threads)  # warm-up
        rounds: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
        for _ in range(args.rounds):
            for kind, (poster, pid, counter) in kinds.items():
                rounds[kind].append(post_load(poster, args.tasks, args.threads,
                                              CpuMeter({kind: pid}), counter))
        out = {k: {**best(v), "rounds": [r["throughput"] for r in v]} for k, v in rounds.items()}
        for kind, label in (("noop", "no-op endpoint"), ("noop_enqueue", "no-op + enqueue"),
                            ("api", "POST /api/v1/tasks")):
            r = out[kind]
            say(f"  {label}: {r['throughput']:.0f}/s (rounds: "
                + ", ".join(f"{x:.0f}" for x in r["rounds"])
                + f"), p50 {r['response_ms']['p50']:.1f} ms, "
                f"{r['cpu']['cpu_ms_per_item'][kind]:.2f} server CPU ms/request"
                + (f", {r['redis_commands']['per_item']:.1f} Redis commands/request"
                   if "redis_commands" in r else ""))
        return out
    finally:
        procs.stop([p for p in (noop, api.api) if p is not None])


def post_load(poster: SenderFactory, count: int, threads: int, cpu: CpuMeter,
              counter: RedisCounter | None = None) -> dict[str, Any]:
    if counter:
        counter.reset()
    cpu.start()
    started = time.perf_counter()
    sub = submit(poster, count, threads)
    wall = time.perf_counter() - started
    out = {"count": count, "accepted": len(sub.ids), "errors": sub.errors,
           "throughput": len(sub.ids) / wall, "response_ms": _ms(summarize(sub.response_seconds)),
           "cpu": cpu.stop(max(1, len(sub.ids)))}
    if counter:
        out["redis_commands"] = counter.snapshot(max(1, len(sub.ids)))
    return out


def _line(who: str, r: dict[str, Any]) -> str:
    lat = r["latency_ms"]
    return (f"  {who}: {r['throughput']:.1f}/s, latency p50 {lat['p50']:.1f} ms, "
            f"p99 {lat['p99']:.1f} ms, {r['redis_commands']['per_item']:.1f} Redis commands "
            f"and {r['cpu']['cpu_ms_per_item_total']:.2f} CPU ms per pipeline"
            + (f", others busy {r['cpu']['others_busy_cores']:.2f} cores"
               if r["cpu"]["others_busy_cores"] is not None else "")
            + ("" if r["complete"] else " (DID NOT COMPLETE in time)"))


def phase_pipelines(base: Baseline, stack: Taskenv,
                    args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """Bursts, then paced loads, the two pipelines taking turns (so that a neighbour's
    load on this shared machine falls on both alike)."""
    bursts: dict[str, list[dict[str, Any]]] = {"baseline": [], "pipeline": []}
    for i in range(args.rounds):
        b = base.load(f"burst-{i}", args.tasks, None)
        say(_line(f"baseline burst {i + 1}", b))
        p = stack.load(f"burst-{i}", args.tasks, None)
        say(_line(f"taskenv  burst {i + 1}", p))
        bursts["baseline"].append(b)
        bursts["pipeline"].append(p)
    best_base, best_pipe = best(bursts["baseline"]), best(bursts["pipeline"])
    rate0 = best_base["throughput"]
    paced: dict[str, list[dict[str, Any]]] = {"baseline": [], "pipeline": []}
    for fraction in args.rates:
        rate = fraction * rate0
        count = max(30, int(rate * args.paced_seconds))
        for who, system in (("baseline", base), ("pipeline", stack)):
            r = system.load(f"paced-{fraction}", count, rate)
            r["fraction"] = fraction
            r.pop("_ids", None)
            paced[who].append(r)
            say(_line(f"{who:8s} paced {fraction:.0%} of {rate0:.0f}/s = {rate:.0f}/s", r))
    return ({"burst": best_base, "burst_rounds": [b["throughput"] for b in bursts["baseline"]],
             "paced": paced["baseline"], "celery_settings": base.settings()},
            {"burst": best_pipe, "burst_rounds": [p["throughput"] for p in bursts["pipeline"]],
             "paced": paced["pipeline"]})


def phase_profile(stack: Taskenv, args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    """One more burst with py-spy sampling the API and each worker (with its children).

    The raw collapsed stacks go to ``profile-<process>.tmp`` beside the results (several
    MB each; ``*.tmp`` there is ignored by git); ``bench/profile.py`` summarises them.
    """
    from bench import profile

    spy = Path(sys.executable).parent / "py-spy"
    if not spy.exists():
        return {"skipped": "py-spy is not installed (pip install -r bench/requirements.txt)"}
    targets = {"api": stack.api.pid}  # type: ignore[union-attr]
    targets.update({f"worker-{q}": w.pid for q, w in zip(QUEUES, stack.workers, strict=True)})
    out_dir.mkdir(parents=True, exist_ok=True)
    # --gil: only samples of threads holding the GIL, i.e. Python actually running.
    spies = {name: subprocess.Popen([str(spy), "record", "--pid", str(pid), "--subprocesses",
                                     "--gil", "--rate", "200", "--format", "raw",
                                     "--nonblocking",
                                     "--output", str(out_dir / f"profile-{name}.tmp")],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for name, pid in targets.items()}
    try:
        time.sleep(1.0)
        result = stack.load("profiled", min(args.tasks, 1000), None)
    finally:
        for p in spies.values():
            p.send_signal(signal.SIGINT)
        for p in spies.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    summary = {name: profile.summarize_file(out_dir / f"profile-{name}.tmp")
               for name in spies}
    say(profile.render(summary))
    return {"throughput_under_profiler": result.get("throughput_to_succeeded"),
            "components": summary}


def phase_listing(procs: Processes, redis_url: str, client: redis.Redis,
                  template_doc: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    token = TOKEN_PREFIX + uuid.uuid4().hex
    env = {"TASKENV_REDIS_URL": redis_url, "TASKENV_PORT": str(port),
           "TASKENV_ADMIN_TOKEN": token, "TASKENV_KEY_PREFIX": GROWTH_PREFIX}
    api = procs.add(start_api(env, procs.logs))
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        raw = client.hget(Keys(TASK_PREFIX).task(template_doc["id"]), "doc")
        if raw is None:
            raise RuntimeError(f"task {template_doc['id']} vanished")
        return growth.listing_cost(client, port, token, GROWTH_PREFIX, _text(raw),
                                   template_doc["id"], template_doc["owner"],
                                   template_doc["state"], small=1_000, large=args.stored,
                                   requests=30 if args.quick else 100)
    finally:
        procs.stop([api])


# --- the run --------------------------------------------------------------------------------

def machine(client: redis.Redis) -> dict[str, Any]:
    model = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    import celery
    import kombu

    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    return {"nproc": len(os.sched_getaffinity(0)), "cpu_model": model,
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                                / 2**30, 1),
            "python": platform.python_version(),
            "redis_server": client.info("server")["redis_version"],
            "celery": celery.__version__, "kombu": kombu.__version__,
            "redis_py": redis.__version__, "flask": _dist_version("flask"),
            "waitress": _dist_version("waitress"),
            "loadavg_at_start": load}


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def strip_private(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_private(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, list):
        return [strip_private(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="taskenv-bench-"))
    procs = Processes(work)

    def on_term(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    began = time.time()
    results: dict[str, Any] = {}
    ok = False
    try:
        say(f"taskenv benchmark: {args.tasks} per saturation phase, best of {args.rounds} "
            f"round(s); {args.threads} client threads; workers -P {args.pool} "
            f"-c {args.concurrency}, one per queue, for both pipelines; "
            f"TASKENV_LAUNCHER=dryrun; waitress threads=8")
        say("[1/5] validation + merge, in-process (timeit, best of 15)")
        merge = growth.merge_cost()
        for row in merge["rows"]:
            say(f"  {row['variables']:>6} variables: {row['seconds'] * 1e3:8.3f} ms "
                f"({row['per_variable_us']:.2f} µs/variable)")
        procs.redis = RedisServer(work / "redis").start()
        client = redis.Redis.from_url(procs.redis.url)
        results["meta"] = {"machine": machine(client), "settings": {
            "tasks": args.tasks, "rounds": args.rounds, "quick": args.quick, "pool": args.pool,
            "concurrency": args.concurrency, "workers": "one per queue",
            "client_threads": args.threads, "waitress_threads": 8,
            "launcher": "dryrun", "paced_seconds": args.paced_seconds,
            "rates": args.rates, "p99_judged_at": args.p99_at, "stored": args.stored,
            "reconciler": "not running", "task": task_body(),
            "policy": {"defaults": 20, "protected": 20, "protected_with_value": 10}}}
        say("  taskenv's own code, in-process, CPU ms per call (best of 3):")
        from bench import stagecost

        results["own_code"] = stagecost.stage_costs(procs.redis.url, task_body(),
                                                    growth.policy_body(),
                                                    n=100 if args.quick else 300)
        for name, ms in results["own_code"]["cpu_ms_per_call"].items():
            say(f"    {ms:7.3f}  {name}")
        say(f"[2/5] POST throughput, no worker running (redis-server "
            f"{results['meta']['machine']['redis_server']})")
        results["post"] = phase_post(procs, procs.redis.url, client, args)
        say("[3/5] the bare three-hop Celery pipeline and taskenv's, taking turns")
        base = Baseline(procs, procs.redis.url, client, args)
        stack = Taskenv(procs, procs.redis.url, client, args)
        stack.start_api()
        base.start_workers()
        stack.start_workers()
        base.warm_up()
        stack.warm_up()
        results["baseline"], results["pipeline"] = phase_pipelines(base, stack, args)
        finals = results["pipeline"]["burst"]["final_states"]
        if set(finals) != {states.SUCCEEDED}:
            say(f"  WARNING: taskenv tasks ended {finals}; expected all succeeded")
        template = stack.docs(results["pipeline"]["burst"]["_ids"][-1:])[0]
        base.stop_workers()
        if args.profile:
            say("[3b] one more taskenv burst under py-spy (API and workers)")
            results["profile"] = phase_profile(stack, args, args.out)
        stack.stop_workers()
        say(f"[4/5] GET /api/v1/tasks?limit=50 at 1,000 and {args.stored:,} stored tasks; "
            "Redis memory per task")
        listing = phase_listing(procs, procs.redis.url, client, template, args)
        results["growth"] = {"merge": merge, "listing": listing}
        say(f"  p50 {listing['get_list_limit_50']['small']['p50'] * 1e3:.1f} ms at 1,000, "
            f"{listing['get_list_limit_50']['large']['p50'] * 1e3:.1f} ms at "
            f"{args.stored:,}; {listing['memory']['bytes_per_task']:.0f} bytes per task")
        with open("/proc/loadavg") as f:
            results["meta"]["machine"]["loadavg_at_end"] = f.read().split()[:3]
        ok = True
    finally:
        say("[5/5] stopping everything this run started")
        procs.stop_everything()
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            say(f"the run failed: the processes' output is kept in {procs.logs}")
    results["meta"]["started_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(began))
    results["meta"]["duration_seconds"] = round(time.time() - began, 1)
    results = strip_private(results)
    results["ratios"], results["targets"] = report.judge(results)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(began))
    text = json.dumps(results, indent=2, default=str)
    (args.out / "latest.json").write_text(text)
    (args.out / f"{stamp}.json").write_text(text)
    plot = report.plot(results, args.out / "latency-vs-load.png")
    say()
    say(report.table(results))
    say()
    say(report.verdicts(results))
    say()
    say(f"results: {args.out / 'latest.json'} (and {stamp}.json); plot: {plot}; "
        f"took {results['meta']['duration_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
