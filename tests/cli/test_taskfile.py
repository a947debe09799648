"""A task file plus an .env file becomes one POST body; a name in both is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli import taskfile
from cli.errors import EnvRejected, UsageProblem

TASK = """\
name: train
steps:
  - [python3, train.py]
env:
  - {name: LR, value: "0.01"}
resources: {gpus: 1}
"""


def files(tmp_path: Path, task: str = TASK, dotenv: str | None = None) -> tuple[Path, Path]:
    (tmp_path / "task.yaml").write_text(task, encoding="utf-8")
    (tmp_path / ".env").write_text(dotenv or "", encoding="utf-8")
    return tmp_path / "task.yaml", tmp_path / ".env"


def test_env_file_variables_follow_the_yaml_env(tmp_path: Path):
    task, env = files(tmp_path, dotenv='DATA_DIR="/data/$USER"\nHF_TOKEN=hf_x\n')

    body = taskfile.body(task, env, secrets=("HF_TOKEN",))

    assert body == {"name": "train", "steps": [["python3", "train.py"]],
                    "resources": {"gpus": 1},
                    "env": [{"name": "LR", "value": "0.01"},
                            {"name": "DATA_DIR", "value": "/data/$USER"},
                            {"name": "HF_TOKEN", "value": "hf_x", "secret": True}]}


def test_a_name_in_both_files_is_an_error_naming_it(tmp_path: Path):
    task, env = files(tmp_path, dotenv="LR=0.1\nOTHER=1\n")

    with pytest.raises(EnvRejected, match=r"set both in .*task\.yaml and in .*\.env: LR$"):
        taskfile.body(task, env)


def test_secret_must_name_a_variable_the_task_sets(tmp_path: Path):
    task, _ = files(tmp_path)

    with pytest.raises(UsageProblem, match="does not set: NOPE"):
        taskfile.body(task, None, secrets=("NOPE",))


@pytest.mark.parametrize(("text", "problem"), [
    ("- just\n- a list\n", "must hold a mapping"),
    ("name: [unclosed\n", "not valid YAML"),
    ("name: x\nenv: {LR: 1}\n", "env must be a list"),
])
def test_bad_task_files_are_usage_problems(tmp_path: Path, text: str, problem: str):
    task, _ = files(tmp_path, task=text)

    with pytest.raises(UsageProblem, match=problem):
        taskfile.body(task, None)


TASK_WITH_FILES = """\
name: train
steps: [[sh, prepare.sh], [python3, train.py]]
files:
  - {path: prepare.sh, source: scripts/prepare.sh, mode: 0755}
  - {path: train.py, content: "print('hi')\\n"}
"""


def test_a_file_s_source_is_read_relative_to_the_task_file(tmp_path: Path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "prepare.sh").write_text("echo $LR\n", encoding="utf-8")
    task, _ = files(tmp_path, TASK_WITH_FILES)
    got = taskfile.body(task, None)["files"]
    assert got == [{"path": "prepare.sh", "content": "echo $LR\n", "mode": 0o755},
                   {"path": "train.py", "content": "print('hi')\n"}]


def test_a_file_needs_content_or_a_readable_source(tmp_path: Path):
    task, _ = files(tmp_path, TASK_WITH_FILES)
    with pytest.raises(UsageProblem, match="cannot read .*prepare.sh"):
        taskfile.body(task, None)
    task, _ = files(tmp_path, "name: t\nsteps: [[x]]\nfiles: [{path: a}]\n")
    with pytest.raises(UsageProblem, match=r"files\[0\] \(a\) needs either content or source"):
        taskfile.body(task, None)
