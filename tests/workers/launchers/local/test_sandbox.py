"""The bwrap command line and the workdir rule, as pure functions."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.task.paths import MAX_WORKDIR_CHARS, workdir_problem
from workers.launchers.common.sandbox import (
    DROP_PWD,
    TASK_HOME,
    BadWorkdir,
    bwrap_argv,
    proc_masks,
    workdir_inside,
)

HOME = Path("/srv/taskenv/tasks/t1/r1/home")


def pairs(argv: list[str], flag: str, width: int) -> list[tuple[str, ...]]:
    """Every occurrence of ``flag`` with the ``width`` arguments that follow it."""
    head = argv[:argv.index("--")]
    return [tuple(head[i + 1:i + 1 + width]) for i, arg in enumerate(head) if arg == flag]


def test_the_step_comes_last_after_a_separator_exactly_as_typed() -> None:
    step = ["python3", "--", "$(HOME)", "a;b", "--bind", "/ /"]
    argv = bwrap_argv(step, HOME, None)
    assert argv[0] == "bwrap"
    assert argv[-len(step):] == step


def test_every_namespace_is_new_and_the_step_runs_as_nobody() -> None:
    argv = bwrap_argv(["true"], HOME, None)
    for flag in ("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert pairs(argv, "--uid", 1) == [("65534",)] and pairs(argv, "--gid", 1) == [("65534",)]
    assert "--share-net" not in argv


def test_only_the_home_is_writable_and_it_is_the_task_s_own() -> None:
    argv = bwrap_argv(["true"], HOME, None)
    assert pairs(argv, "--bind", 2) == [(str(HOME), TASK_HOME)]
    assert [t for t, in pairs(argv, "--tmpfs", 1) if not t.startswith("/proc/")] == ["/tmp"]
    assert pairs(argv, "--proc", 1) == [("/proc",)] and pairs(argv, "--dev", 1) == [("/dev",)]


def test_only_system_directories_are_seen_read_only() -> None:
    argv = bwrap_argv(["true"], HOME, None)
    sources = [src for src, _ in pairs(argv, "--ro-bind", 2) + pairs(argv, "--ro-bind-try", 2)]
    assert "/usr" in sources and "/etc/ld.so.cache" in sources
    for forbidden in ("/", "/etc", "/etc/passwd", "/var", "/root", "/home", "/srv", "/proc"):
        assert forbidden not in sources
    assert all(src.startswith(("/usr", "/bin", "/sbin", "/lib", "/etc/", "/dev/null"))
               for src in sources)


def test_a_runtime_s_system_directories_take_the_place_of_the_host_s() -> None:
    host = bwrap_argv(["true"], HOME, None)
    argv = bwrap_argv(["true"], HOME, None, runtime="/opt/runtimes/pytorch/")
    binds = pairs(argv, "--ro-bind", 2) + pairs(argv, "--ro-bind-try", 2)
    system = [(src, dest) for src, dest in binds if src != "/dev/null"]
    assert ("/opt/runtimes/pytorch/usr", "/usr") in system
    assert ("/opt/runtimes/pytorch/etc/ld.so.cache", "/etc/ld.so.cache") in system
    assert all(src == "/opt/runtimes/pytorch" + dest for src, dest in system), system
    # the same places as the host's, and nothing else changes
    assert [dest for _, dest in system] == [
        dest for src, dest in pairs(host, "--ro-bind", 2) + pairs(host, "--ro-bind-try", 2)
        if src != "/dev/null"]
    # nothing else changes: with the runtime's root taken off, the host's argv
    assert [a.removeprefix("/opt/runtimes/pytorch") if a.startswith("/opt/runtimes/") else a
            for a in argv] == host


def test_no_env_value_is_ever_on_the_command_line() -> None:
    argv = bwrap_argv(["true"], HOME, "runs/1")
    assert "--setenv" not in argv and "--clearenv" not in argv  # bwrap's env is the step's


def test_the_step_starts_in_the_workdir_inside_its_home() -> None:
    assert pairs(bwrap_argv(["true"], HOME, None), "--chdir", 1) == [(TASK_HOME,)]
    assert pairs(bwrap_argv(["true"], HOME, "runs/exp 1"), "--chdir", 1) == [
        (f"{TASK_HOME}/runs/exp 1",)]
    assert workdir_inside("var") == f"{TASK_HOME}/var"
    assert workdir_inside("./a/./b/") == f"{TASK_HOME}/a/b"


@pytest.mark.parametrize("workdir", ["/", "/etc", "../../etc", "..", "a/../../b", "a/..",
                                     "a\0b", "x" * (MAX_WORKDIR_CHARS + 1)])
def test_a_workdir_outside_the_home_is_refused(workdir: str) -> None:
    assert workdir_problem(workdir)
    with pytest.raises(BadWorkdir):
        workdir_inside(workdir)
    with pytest.raises(BadWorkdir):
        bwrap_argv(["true"], HOME, workdir)


@pytest.mark.parametrize("workdir", ["var", "runs/1", "a..b", "..hidden", "数据", "x" * 255,
                                     "/".join(["x" * 255] * 4)])
def test_a_relative_workdir_inside_the_home_is_accepted(workdir: str) -> None:
    assert workdir_problem(workdir) is None


@pytest.mark.parametrize("workdir", ["x" * 256, "runs/" + "数" * 86])
def test_a_component_longer_than_a_file_name_may_be_is_refused(workdir: str) -> None:
    """NAME_MAX is 255 bytes, counted in UTF-8: 86 three-byte characters are 258."""
    assert "255 bytes" in (workdir_problem(workdir) or "")


def test_the_problem_says_what_is_wrong() -> None:
    assert "absolute" in (workdir_problem("/") or "")
    assert "'..'" in (workdir_problem("../../etc") or "")
    assert "NUL" in (workdir_problem("a\0") or "")


def test_pwd_set_by_bwrap_is_dropped_unless_the_env_sets_it() -> None:
    argv = bwrap_argv(["python3", "x=y"], HOME, None)
    assert argv[argv.index("--") + 1:] == [*DROP_PWD, "python3", "x=y"]
    kept = bwrap_argv(["python3"], HOME, None, env_sets_pwd=True)
    assert kept[kept.index("--") + 1:] == ["python3"]


def test_the_host_s_kernel_details_in_proc_are_covered(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "acpi").mkdir(parents=True)
    (proc / "kallsyms").write_text("ffffffff T _text")
    (proc / "keys").write_text("")
    args = proc_masks(str(proc))
    assert pairs([*args, "--"], "--ro-bind", 2) == [("/dev/null", "/proc/kallsyms"),
                                                    ("/dev/null", "/proc/keys")]
    assert pairs([*args, "--"], "--tmpfs", 1) == [("/proc/acpi",)]  # only what exists


def test_limits_cap_tmp_and_a_runner_made_network_is_kept() -> None:
    argv = bwrap_argv(["true"], HOME, None, tmp_bytes=32 << 20, share_net=True)
    head = argv[:argv.index("--")]
    assert head[head.index("--tmpfs", head.index("--size")) - 2:][:4] == [
        "--size", str(32 << 20), "--tmpfs", "/tmp"]
    assert "--share-net" in argv and "--unshare-all" in argv
