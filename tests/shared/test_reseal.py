"""Key rotation: every sealed value is sealed again with the new key, so the old can go."""

from __future__ import annotations

import pytest

from shared.errors import SecretsUnavailable
from shared.keys import Keys
from shared.policy.model import Policy, project_scope
from shared.policy.store import PolicyStore
from shared.secrets import Cipher, new_key
from shared.store.tasks import TaskStore
from shared.task import records

SECRET = "rotate-me-4f1c9a"
POLICY = {"defaults": [{"name": "WANDB_API_KEY", "value": SECRET, "secret": True}],
          "protected": [{"name": "HF_HOME", "value": SECRET + "-locked", "secret": True,
                         "reason": "shared cache"}]}


def task_with_two_revisions(tasks: TaskStore) -> str:
    env = [{"name": "HF_TOKEN", "value": SECRET, "secret": True}]
    doc, _ = tasks.create(records.new_task({"name": "t", "steps": [["true"]], "env": env},
                                           "alice"))
    tasks.update(doc["id"], lambda d: {**d, "resolved": [dict(env[0], source="user")]})
    tasks.update(doc["id"], lambda d: records.new_revision(d, env, "alice", "patch"))
    return str(doc["id"])


def test_every_revision_reads_with_the_new_key_alone(redis_client) -> None:
    old, new = new_key(), new_key()
    task_id = task_with_two_revisions(TaskStore(redis_client, cipher=Cipher([old])))

    assert TaskStore(redis_client, cipher=Cipher([new, old])).reseal(task_id) == 2

    after = TaskStore(redis_client, cipher=Cipher([new]))
    for n in (1, 2):
        assert after.revision(task_id, n)["env"][0]["value"] == SECRET
    assert after.revision(task_id, 1)["resolved"][0]["value"] == SECRET
    with pytest.raises(SecretsUnavailable):  # the old key alone no longer opens them
        TaskStore(redis_client, cipher=Cipher([old])).revision(task_id, 1)


def test_every_policy_version_of_every_scope_reads_with_the_new_key_alone(redis_client) -> None:
    old, new = new_key(), new_key()
    before = PolicyStore(redis_client, cipher=Cipher([old]))
    before.put(Policy.from_dict(POLICY))
    before.put(Policy.from_dict(POLICY))
    redis_client.sadd(Keys().projects(), "vision")
    before.scoped(project_scope("vision")).put(Policy.from_dict(POLICY))

    rotating = PolicyStore(redis_client, cipher=Cipher([new, old]))
    rotating.get(1)  # cached before rotation: the cache must not outlive it
    assert rotating.reseal_all() == 3

    after = PolicyStore(redis_client, cipher=Cipher([new]))
    for policy in (after.get(1), after.get(2), after.scoped("project:vision").current()):
        assert policy is not None
        assert policy.defaults[0].value == SECRET
        assert policy.protected[0].value == SECRET + "-locked"
    assert rotating.get(1).defaults[0].value == SECRET
