"""TASKENV_RUNTIMES as the admin writes it, and a task's image checked against it."""

from __future__ import annotations

import pytest

from shared.config import DEFAULT_IMAGE, Settings
from shared.task import runtimes

SETTING = "pytorch-2.13=/opt/runtimes/pytorch/, localhost/taskenv-pytorch:2.13=/srv/rt/pt"


def test_the_setting_maps_names_to_absolute_normalised_paths() -> None:
    assert dict(runtimes.parse(SETTING)) == {
        "pytorch-2.13": "/opt/runtimes/pytorch",
        "localhost/taskenv-pytorch:2.13": "/srv/rt/pt"}
    assert runtimes.parse("") == {}


@pytest.mark.parametrize(("setting", "said"), [
    ("pytorch", "has no '=/path'"),
    ("pytorch=opt/rt", "not absolute"),
    ("a=/x,a=/y", "registered twice"),
    ("../up=/x", "is not a runtime name"),
    ("a b=/x", "is not a runtime name"),
])
def test_a_setting_that_cannot_be_read_is_refused_naming_the_entry(setting: str,
                                                                   said: str) -> None:
    with pytest.raises(runtimes.BadRuntimes) as caught:
        runtimes.parse(setting)
    assert "TASKENV_RUNTIMES" in str(caught.value) and said in str(caught.value)


@pytest.mark.parametrize("image", [None, "", DEFAULT_IMAGE])
def test_no_image_or_the_default_one_names_no_runtime(image: str | None) -> None:
    assert runtimes.named(image) is None
    assert runtimes.problems(image, Settings()) == []


def test_a_registered_runtime_passes_and_any_other_name_is_a_problem_naming_them_all(
        ) -> None:
    settings = Settings(runtimes=SETTING)
    assert runtimes.problems("pytorch-2.13", settings) == []
    for image in ("jax", "pytorch-2.13/../../etc", "/opt/runtimes/pytorch", "PYTORCH-2.13"):
        [problem] = runtimes.problems(image, settings)
        assert (problem.rule, problem.field) == ("runtime_unknown", "image")
        assert "localhost/taskenv-pytorch:2.13, pytorch-2.13" in problem.message, problem
    [none] = runtimes.problems("jax", Settings())
    assert "TASKENV_RUNTIMES registers none" in none.message
