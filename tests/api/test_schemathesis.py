"""Property-based tests generated from our own OpenAPI document.

Every operation is called with generated (valid and invalid) data; no answer
may be a 5xx, and every answer must match the status codes, content types and
schemas the document declares.  One check is left out: "schema-valid data is
accepted".  The document states JSON types; the env rules (name syntax, sizes,
the policy) are domain rules that no JSON Schema can state, and an env list that
breaks them is rightly answered 422 (or rejected by the validation stage).
"""

from __future__ import annotations

import fakeredis
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from api import create_app
from shared.env.envlist import Limits
from shared.policy.store import PolicyStore
from shared.secrets import Cipher, new_key
from shared.store.tasks import TaskStore
from workers import stages

ADMIN = "tke_schemathesis-admin-0123456789abcdef"
KEY = new_key()


def build_app():
    client = fakeredis.FakeRedis(decode_responses=True)
    cipher = Cipher([KEY])
    tasks, policies = TaskStore(client, cipher=cipher), PolicyStore(client, cipher=cipher)

    def enqueue(task_id: str, revision: int) -> None:  # the first two stages, in-process
        if stages.validate(tasks, Limits(), task_id, revision):
            stages.apply_policy(tasks, policies, task_id, revision)

    # A high failure allowance: generated requests must not trip the auth rate limit.
    return create_app({"admin_token": ADMIN, "secret_keys": KEY,
                       "auth_failures_per_minute": 10**9},
                      redis_client=client, enqueue=enqueue)


app = build_app()
AUTH = {"Authorization": f"Bearer {ADMIN}"}
schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", app, headers=AUTH)


@schema.auth()
class AdminToken:
    """Every generated request carries a valid token (auth itself: tests/api/test_auth.py)."""

    def get(self, case, context):
        return ADMIN

    def set(self, case, data, context):
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@pytest.mark.slow  # a fuzzer: ~70 s of the inner loop; make test runs it
@schema.parametrize()
# 40 examples per operation, or fewer when the active profile asks for fewer (make check)
@settings(max_examples=min(40, settings.default.max_examples), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_api_conforms_to_its_openapi_document(case):
    case.call_and_validate(excluded_checks=[positive_data_acceptance])
