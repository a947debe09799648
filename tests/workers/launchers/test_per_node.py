"""The platform's per-node defaults on the launchers that run on the worker's own host
(local, podman): that host is the node a glob is matched against."""

from __future__ import annotations

from tests.workers.conftest import build_workload
from workers.launchers.local import launcher as local
from workers.launchers.podman import launcher as podman

PER_NODE = (("SITE", "here", "{host}"), ("SITE", "elsewhere", "*"),
            ("OTHER", "never", "no-such-host-*"), ("LR", "0.9", "*"))


def workload_here() -> object:
    per_node = tuple((n, v, g.format(host=local.HOST)) for n, v, g in PER_NODE)
    return build_workload([["true"]], env={"LR": "0.1"}, per_node=per_node)


def test_the_local_launcher_gives_a_step_this_hosts_values_and_never_overrides() -> None:
    env = local.step_env(workload_here(), "/home/task")  # type: ignore[arg-type]
    assert (env["SITE"], env["LR"]) == ("here", "0.1")
    assert "OTHER" not in env


def test_the_podman_launcher_puts_this_hosts_values_in_the_pod_spec() -> None:
    chosen = podman.with_node_values(workload_here())  # type: ignore[arg-type]
    assert [(v.name, v.value, v.source) for v in chosen.env if v.source == "node"] == [
        ("SITE", "here", "node")]
    assert podman.HOST == local.HOST
