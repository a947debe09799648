"""Every key the API's task schema accepts is one the CLI takes in a task file, and
``taskenv submit --help`` and the README list it: the list is cli.taskfile.KEYS, and
these tests hold it to the schema."""

from __future__ import annotations

import re
from pathlib import Path

import marshmallow as ma
import pytest
from click.testing import CliRunner

from api.schemas import EnvEntry, FileEntry, ResourcesSchema, TaskCreate
from cli import taskfile
from cli.errors import TaskFileMalformed
from cli.main import taskenv

README = Path(__file__).resolve().parents[2] / "README.md"
# The keys of what a task file's key holds: a mapping's, or each entry's of a list;
# ``source`` is the CLI's own (it reads the file and sends its content).
NESTED: dict[str, tuple[type[ma.Schema], set[str]]] = {
    "resources": (ResourcesSchema, set()), "env": (EnvEntry, set()),
    "files": (FileEntry, {"source"})}


def accepted() -> list[str]:
    return list(TaskCreate().fields)


def listed() -> dict[str, str]:
    """The keys ``taskenv submit --help`` lists, each with what it says of it."""
    done = CliRunner().invoke(taskenv, ["submit", "--help"], terminal_width=80)
    assert done.exit_code == 0, done.output
    keys: dict[str, str] = {}
    for line in done.output.splitlines():
        if found := re.match(r"^ {4}(\w+) {2,}(.*)$", line):
            keys[found[1]] = found[2]
        elif keys and re.match(r"^ {6,}\S", line):  # what the last key says, wrapped
            keys[list(keys)[-1]] += " " + line.strip()
    return keys


def test_the_cli_takes_every_key_the_api_accepts_and_no_other():
    assert sorted(taskfile.KNOWN) == sorted(accepted())
    for name, (schema, own) in NESTED.items():
        assert set(taskfile.KNOWN[name].holds) == set(schema().fields) | own, name


@pytest.mark.parametrize("key", accepted())
def test_submit_help_lists_each_key_the_api_accepts(key: str):
    assert key in listed(), f"taskenv submit --help does not list {key}"


@pytest.mark.parametrize("key", list(NESTED))
def test_submit_help_names_the_keys_under_a_key(key: str):
    said = listed()[key]
    schema, own = NESTED[key]
    for name in set(schema().fields) | own:
        assert re.search(rf"\b{name}\b", said), f"{key}: {name} is not named in {said!r}"


def test_the_readme_names_each_key_of_a_task_file():
    section = README.read_text(encoding="utf-8").split("## Command line", 1)[1]
    for key in accepted():
        assert f"`{key}`" in section, f"README's Command line section does not name {key}"


def test_an_unknown_key_is_refused_naming_it_and_the_nearest(tmp_path: Path):
    path = tmp_path / "task.yaml"
    path.write_text("name: t\nstep: [[x]]\nfiles: [{path: a, contents: b}]\nimage_: x\n",
                    encoding="utf-8")

    with pytest.raises(TaskFileMalformed) as refused:
        taskfile.body(path, None)

    said = str(refused.value)
    assert "step is not a key it takes (did you mean steps?)" in said
    assert "files[0].contents is not a key it takes (did you mean content?)" in said
    assert "image_ is not a key it takes (did you mean image?)" in said
    assert "name, steps, env, env_file, files" in said  # and every key it does take
