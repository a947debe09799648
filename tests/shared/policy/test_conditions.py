"""Conditions on policy entries: parsing, matching, naming and overlap."""

from __future__ import annotations

import pytest

from shared.policy.conditions import GpuCondition, TaskFacts, When, check_when, may_overlap

GPU_TASK = TaskFacts(gpus=2, image="nvcr.io/pytorch:24.01", project="vision")
CPU_TASK = TaskFacts(gpus=0, image="localhost/taskenv-runtime:latest", project="nlp")


@pytest.mark.parametrize(("expression", "op", "count"), [
    (">=1", ">=", 1), ("0", "==", 0), ("<2", "<", 2), ("==4", "==", 4), ("!= 3", "!=", 3),
    (" > 0 ", ">", 0), ("=8", "==", 8), (2, "==", 2),
])
def test_gpu_expressions_parse(expression: str | int, op: str, count: int) -> None:
    assert GpuCondition.parse(expression) == GpuCondition(op, count)


@pytest.mark.parametrize("expression", ["", "lots", ">=", "=>1", "1.5", "-1", -1, True, ">=1,<4"])
def test_invalid_gpu_expression_is_a_problem_naming_the_field(expression: object) -> None:
    problems = check_when({"gpus": expression}, "defaults[3].when")
    assert [(p.rule, p.field) for p in problems] == [("when.gpus_invalid",
                                                      "defaults[3].when.gpus")]


def test_unknown_conditions_and_wrong_types_are_problems() -> None:
    problems = check_when({"gpu": ">=1", "image": 5}, "rules[0].when")
    assert sorted((p.rule, p.field) for p in problems) == [
        ("when.invalid", "rules[0].when.gpu"), ("when.invalid", "rules[0].when.image")]
    assert check_when("gpus>=1", "w")[0].rule == "when.invalid"
    assert check_when(None, "w") == [] and check_when({"gpus": ">=1", "image": "*"}, "w") == []


def test_gpu_condition_matches_gpu_tasks_only() -> None:
    when = When.from_dict({"gpus": ">=1"})
    assert when is not None and when.matches(GPU_TASK) and not when.matches(CPU_TASK)


def test_image_and_project_are_case_sensitive_globs() -> None:
    when = When.from_dict({"image": "nvcr.io/*", "project": "vis*"})
    assert when is not None and when.matches(GPU_TASK)
    assert not when.matches(TaskFacts(2, "NVCR.IO/pytorch", "vision"))
    assert not when.matches(TaskFacts(2, "nvcr.io/pytorch", None))


def test_every_condition_must_hold() -> None:
    when = When.from_dict({"gpus": "0", "image": "nvcr.io/*"})
    assert when is not None and not when.matches(GPU_TASK) and not when.matches(CPU_TASK)


def test_condition_text_names_what_matched() -> None:
    assert When.from_dict({"gpus": ">= 1"}).text() == "gpus>=1"  # type: ignore[union-attr]
    when = When.from_dict({"gpus": "0", "image": "cuda:*", "project": "nlp"})
    assert when is not None and when.text() == "gpus==0 and image=cuda:* and project=nlp"


def test_when_round_trips_and_empty_means_always() -> None:
    data = {"gpus": ">=1", "image": "nvcr.io/*", "project": "vision"}
    assert When.from_dict(When.from_dict(data).to_dict()) == When.from_dict(data)  # type: ignore[union-attr]
    assert When.from_dict({}) is None and When.from_dict(None) is None


def test_facts_from_a_task_record() -> None:
    doc = {"resources": {"gpus": 4}, "image": None, "project": "vision"}
    assert TaskFacts.from_doc(doc, "default:img") == TaskFacts(4, "default:img", "vision")
    assert TaskFacts.from_doc({}) == TaskFacts(0, "", None)


@pytest.mark.parametrize(("a", "b", "overlap"), [
    ({"gpus": ">=1"}, {"gpus": "0"}, False),
    ({"gpus": "<2"}, {"gpus": ">=1"}, True),
    ({"gpus": "!=0"}, {"gpus": ">4"}, True),
    ({"gpus": "==4"}, {"gpus": "!=4"}, False),
    ({"image": "cuda:12"}, {"image": "cuda:11"}, False),
    ({"image": "cuda:*"}, {"image": "cuda:11"}, True),
    ({"image": "rocm:*"}, {"image": "cuda:11"}, False),
    ({"image": "cuda:*"}, {"image": "*:11"}, True),
    ({"gpus": ">=1"}, {"image": "cuda:*"}, True),
    ({"gpus": ">=1", "project": "a"}, {"gpus": ">=1", "project": "b"}, False),
])
def test_may_overlap(a: dict[str, str], b: dict[str, str], overlap: bool) -> None:
    assert may_overlap(When.from_dict(a), When.from_dict(b)) is overlap
    assert may_overlap(When.from_dict(b), When.from_dict(a)) is overlap
    assert may_overlap(None, When.from_dict(a))


def test_node_globs_with_other_literal_heads_or_tails_never_overlap() -> None:
    from shared.policy.conditions import When, may_overlap

    def node(glob: str) -> When:
        return When(node=glob)

    assert not may_overlap(node("gpu-*"), node("cpu-*"))
    assert not may_overlap(node("*-a"), node("*-b"))
    assert not may_overlap(node("n[01]-x"), node("n[01]-y"))
    assert may_overlap(node("gpu-*"), node("gpu-a*"))
    assert may_overlap(node("*"), node("cpu-1"))
    assert may_overlap(node("g*"), None)
