"""The commands the Kubernetes docs tell a reader to run name what the manifests define.

deploy/k8s/README.md, the Slurm READMEs, docs/kubernetes.md and the manifests' comments
are replayed and checked by tests/deploy/doc_blocks.py: every Secret, key, ConfigMap,
namespace, object and image a command reads or sets is the manifests', every ``make``
target and variable the Makefile's, and no apply puts placeholders over what the reader
created.  The last tests bring back, in a copy of the repository, each mistake a new
user once met, and check that it is reported with its doc and line.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.deploy import doc_blocks
from tests.deploy.doc_blocks import Mismatch
from tests.deploy.test_k8s_manifests import (
    follow_step_2_and_the_slurm_component,
    git_copy,
    setting_names,
)

REPO = Path(__file__).resolve().parents[2]
README = "deploy/k8s/README.md"
EXAMPLE = "deploy/k8s/overlays/example/kustomization.yaml"


def report(mismatches: list[Mismatch]) -> str:
    return "\n".join(map(str, mismatches))


# --- the docs as they are ----------------------------------------------------------------------

def test_the_docs_are_read_as_one_walkthrough_with_what_a_reader_runs():
    """Not vacuous: the commands are found where the docs have them."""
    parsed = doc_blocks.parse(REPO, README)
    assert not parsed.unparsable, parsed.unparsable
    programs = [c.argv[0] for c in parsed.commands]
    assert {"make", "cp", "kubectl", "cat"} <= set(programs)
    assert doc_blocks.kubernetes_docs(REPO)[0] == README
    assert "docs/kubernetes.md" in doc_blocks.kubernetes_docs(REPO)
    assert EXAMPLE in doc_blocks.kubernetes_docs(REPO)


def test_every_make_command_names_a_target_and_variables_the_makefile_reads():
    commands = [c for doc in doc_blocks.kubernetes_docs(REPO)
                for c in doc_blocks.parse(REPO, doc).commands]
    assert [c for c in commands if c.argv[:1] == ("make",)]
    assert not (found := doc_blocks.make_mismatches(REPO, commands)), report(found)


def test_every_step_and_section_a_doc_points_at_is_there_and_about_it():
    assert set(doc_blocks.steps((REPO / README).read_text())) == {1, 2, 3, 4, 5}
    found = doc_blocks.reference_mismatches(REPO, doc_blocks.kubernetes_docs(REPO))
    assert not found, report(found)


@pytest.mark.kubectl
def test_the_walkthrough_builds_creates_and_applies_without_overwriting_anything(doc_walk):
    assert not doc_walk.mismatches, report(doc_walk.mismatches)
    assert [image for _, image in doc_walk.built] == \
        ["registry.example.com/platform/taskenv:1.0.0"]
    created = {(c.kind, c.namespace, c.name) for c in doc_walk.created}
    assert {("Secret", "taskenv", n) for n in ("taskenv-redis", "taskenv-settings",
                                               "taskenv-api", "taskenv-munge")} <= created
    applied = [r for r in doc_walk.renders if r.applied and r.command.doc == README]
    assert [r.target for r in applied] == ["deploy/k8s/base/namespaces.yaml",
                                           "deploy/k8s/overlays/prod", "deploy/k8s/overlays/prod"]


@pytest.mark.kubectl
def test_every_secret_key_namespace_object_and_setting_a_command_names_is_the_manifests(
        doc_walk):
    found = doc_blocks.check(doc_walk, REPO, settings=setting_names())
    assert not found, report(found)


@pytest.mark.kubectl
def test_the_admin_token_is_read_from_the_secret_that_holds_it(doc_walk):
    (read,) = [c for c in doc_walk.commands if c.doc == README and "get" in c.argv
               and "secret" in c.argv]
    known = doc_blocks.catalogue(doc_walk, REPO)
    name = read.argv[read.argv.index("secret") + 1]
    assert "TASKENV_ADMIN_TOKEN" in known.keys[("Secret", "taskenv", name)]
    assert name == "taskenv-api"


@pytest.mark.kubectl
def test_the_walkthrough_in_a_checkout_where_the_reader_followed_it_already(tmp_path, doc_walk):
    """A reader's own overlays/prod in the tree (step 2 and the Slurm component, done by
    hand) changes nothing of what the walkthrough's replay copies, renders and finds."""
    repo = git_copy(tmp_path / "checkout")
    follow_step_2_and_the_slurm_component(repo)
    walk = doc_blocks.walk_docs(repo, [README], tmp_path / "walk")
    assert not walk.mismatches, report(walk.mismatches)
    again = [r.objects for r in walk.renders if r.applied]
    assert again == [r.objects for r in doc_walk.renders if r.applied and r.command.doc == README]


# --- the mistakes a new user met, brought back -------------------------------------------------

@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """What the checks read: deploy/, the docs they point at, the Makefile."""
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "deploy", repo / "deploy")
    (repo / "docs").mkdir()
    for name in ("kubernetes.md", "launchers.md"):
        shutil.copy(REPO / "docs" / name, repo / "docs" / name)
    shutil.copy(REPO / "Makefile", repo / "Makefile")
    return repo


def edit(repo: Path, doc: str, old: str, new: str) -> int:
    """Replace ``old`` (once) in ``doc``; the line ``new`` starts on."""
    text = (repo / doc).read_text()
    assert text.count(old) == 1, old
    (repo / doc).write_text(text.replace(old, new))
    return text[:text.index(old)].count("\n") + 1


def everything(repo: Path, tmp_path: Path, docs: list[str]) -> list[Mismatch]:
    walk = doc_blocks.walk_docs(repo, docs, tmp_path / "walk")
    return walk.mismatches + doc_blocks.check(walk, repo, settings=setting_names()) \
        + doc_blocks.reference_mismatches(repo, docs)


def reported(found: list[Mismatch], where: str, *words: str) -> bool:
    """Some mismatch is at ``where`` (doc:line) and says each of ``words``."""
    return any(m.where == where and all(w in str(m) for w in words) for m in found)


@pytest.mark.kubectl
def test_reading_the_admin_token_from_the_wrong_secret_is_reported(copy, tmp_path):
    line = edit(copy, README, "get secret taskenv-api -o", "get secret taskenv-settings -o")
    found = everything(copy, tmp_path, [README])
    assert reported(found, f"{README}:{line}", "taskenv-settings", "TASKENV_ADMIN_TOKEN",
                    "taskenv-api"), report(found)


@pytest.mark.kubectl
def test_a_secret_created_in_the_wrong_namespace_is_reported(copy, tmp_path):
    line = edit(copy, README, "kubectl -n taskenv create secret generic taskenv-api",
                "kubectl -n taskenv-tasks create secret generic taskenv-api")
    found = everything(copy, tmp_path, [README])
    assert reported(found, f"{README}:{line}", "lives in namespace taskenv",
                    "not taskenv-tasks"), report(found)
    apply = [c for c in doc_blocks.parse(copy, README).commands if "apply" in c.argv][1]
    assert reported(found, apply.where, "read Secret taskenv/taskenv-api",
                    "nor any command before it creates"), report(found)


@pytest.mark.kubectl
def test_a_secret_created_with_a_wrong_key_is_reported(copy, tmp_path):
    edit(copy, README, '--from-literal=TASKENV_SESSION_SECRET="$(openssl rand -hex 32)"',
         '--from-literal=SESSION_SECRET="$(openssl rand -hex 32)"')
    (create,) = [c for c in doc_blocks.parse(copy, README).commands
                 if "taskenv-api" in c.argv and "create" in c.argv]
    found = everything(copy, tmp_path, [README])
    assert reported(found, create.where, "has no key SESSION_SECRET"), report(found)
    assert reported(found, create.where, "without the key TASKENV_SESSION_SECRET"), \
        report(found)


@pytest.mark.kubectl
def test_the_example_overlays_wrong_make_variable_and_step_are_reported(copy, tmp_path):
    make = edit(copy, EXAMPLE, "`make k8s-image K8S_IMAGE=...`", "`make k8s-image IMAGE=...`")
    step = edit(copy, EXAMPLE, "(deploy/k8s/README.md, step 3)", "(deploy/k8s/README.md, step 2)")
    found = everything(copy, tmp_path, [README, EXAMPLE])
    assert reported(found, f"{EXAMPLE}:{make}", "reads no variable IMAGE", "K8S_IMAGE"), \
        report(found)
    assert reported(found, f"{EXAMPLE}:{step}", "step 2", "Your overlay",
                    "fit step 3"), report(found)


OLD_SLURM = {
    "kustomization.yaml": """\
# taskenv submitting its tasks to an existing Slurm cluster, on Kubernetes:
#   kubectl apply -k deploy/slurm/k8s
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../../k8s
  - slurm.yaml
patches:
  - path: settings.yaml
  - path: submitters.yaml
    target: {kind: Deployment, name: "taskenv-(launch|reconciler)"}
""",
    "slurm.yaml": """\
apiVersion: v1
kind: Secret
metadata: {name: taskenv-munge, namespace: taskenv}
stringData:
  munge.key: REPLACE-ME-with-the-clusters-munge-key
---
apiVersion: v1
kind: ConfigMap
metadata: {name: taskenv-slurm, namespace: taskenv}
data:
  slurm.conf: "# REPLACE-ME: the cluster's /etc/slurm/slurm.conf"
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: taskenv-slurm-shared, namespace: taskenv}
spec:
  accessModes: [ReadWriteMany]
  resources:
    requests: {storage: 100Gi}
""",
}


@pytest.mark.kubectl
def test_applying_the_slurm_variant_over_the_real_secrets_and_image_is_reported(copy, tmp_path):
    """The Slurm variant as it once was: a kustomization including ../../k8s (placeholder
    Secrets, taskenv:latest), applied as the README said, after the Secrets of step 3."""
    slurm = copy / "deploy" / "slurm" / "k8s"
    for name, text in OLD_SLURM.items():
        (slurm / name).write_text(text)
    readme = (copy / README).read_text()
    section = readme[readme.index("## Submitting to a Slurm cluster"):readme.index("## Redis")]
    old = ("## Submitting to a Slurm cluster\n\n"
           "`kubectl apply -k\ndeploy/slurm/k8s` instead of `deploy/k8s` (it includes it).\n\n")
    line = edit(copy, README, section, old) + 2
    found = everything(copy, tmp_path, [README, "deploy/slurm/k8s/kustomization.yaml"])
    where = f"{README}:{line}"
    assert reported(found, where, "overwrites Secret taskenv/taskenv-settings",
                    f"{README}:"), report(found)
    assert reported(found, where, "placeholders (REPLACE-ME) of Secret taskenv/taskenv-api"), \
        report(found)
    assert reported(found, where, "run taskenv:latest, not registry.example.com/platform/"
                                  "taskenv:1.0.0"), report(found)
    # The manifest's own comment says the same, read after the README's walkthrough.
    assert reported(found, "deploy/slurm/k8s/kustomization.yaml:2",
                    "overwrites Secret taskenv/taskenv-settings"), report(found)
