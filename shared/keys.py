"""Every Redis key taskenv writes, in one place.

All keys live under one prefix (``TASKENV_KEY_PREFIX``, ``taskenv`` by default), so
several deployments can share a Redis and an operator can tell taskenv's keys from
others'.  A task's own keys (its log, heartbeat, ...) begin with the task's key, so
``SCAN prefix:task:<id>*`` finds everything about one task.  No key ever holds a
secret value: tokens appear only as their SHA-256 digest.
"""

from __future__ import annotations

REVISION_SUFFIX = ":rev:"
BY_STATE_SUFFIX = ":by-state"
VALUES_SUFFIX = ":vals"


class Keys:
    def __init__(self, prefix: str = "taskenv") -> None:
        self.prefix = prefix

    # --- tasks ---------------------------------------------------------------------------

    def task(self, task_id: str) -> str:
        """The task's hash: its small fields, ``state``, ``revision``, ``v`` (write counter)."""
        return f"{self.prefix}:task:{task_id}"

    def revision(self, task_id: str, revision: int | str) -> str:
        """One revision's hash: env, resolved env, errors, outcome; written once per field.

        The store's Lua scripts build this name from the task's key and
        :data:`REVISION_SUFFIX` (a script cannot call Python), so both stay in step.
        """
        return f"{self.task(task_id)}{REVISION_SUFFIX}{revision}"

    def values(self, task_id: str) -> str:
        """The task's value pool (a hash): long values its revisions share, by an id
        drawn at random when the value is first stored, never derived from the value.
        The store's scripts build it from the task's key and :data:`VALUES_SUFFIX`."""
        return f"{self.task(task_id)}{VALUES_SUFFIX}"

    def log(self, task_id: str, revision: int) -> str:
        return f"{self.task(task_id)}:log:{revision}"

    def log_cut(self, task_id: str, revision: int) -> str:
        """How many bytes trimming has dropped from the front of the revision's log."""
        return f"{self.task(task_id)}:logcut:{revision}"

    def beat(self, task_id: str, revision: int) -> str:
        """Exists while a launch worker holds the revision."""
        return f"{self.task(task_id)}:beat:{revision}"

    def suspect(self, task_id: str, revision: int) -> str:
        """When a reconciler first found the revision without a heartbeat."""
        return f"{self.task(task_id)}:suspect:{revision}"

    def requeue_claim(self, task_id: str, revision: int, state: str) -> str:
        return f"{self.task(task_id)}:requeued:{revision}:{state}"

    def slot_leases(self, host: str) -> str:
        """A sorted set: the revisions holding one of ``host``'s run slots, by lease end."""
        return f"{self.prefix}:slots:{host}:leases"

    def slot_queue(self, host: str) -> str:
        """A list: the revisions waiting for one of ``host``'s run slots, oldest first."""
        return f"{self.prefix}:slots:{host}:queue"

    def slot_weights(self, host: str) -> str:
        """A hash: how many slots each holding or waiting revision takes (its replicas)."""
        return f"{self.prefix}:slots:{host}:weights"

    def task_uid_leases(self) -> str:
        """A sorted set: the revisions holding a task uid, by lease end."""
        return f"{self.prefix}:uids:leases"

    def task_uid_held(self) -> str:
        """A hash: each holding revision's uid."""
        return f"{self.prefix}:uids:held"

    def task_uid_owner(self) -> str:
        """A hash: each held uid's revision."""
        return f"{self.prefix}:uids:owner"

    def task_uid_free(self) -> str:
        """A list: uids given back, the longest unused first."""
        return f"{self.prefix}:uids:free"

    def task_uid_next(self) -> str:
        """A counter: the uids of the range given out at least once."""
        return f"{self.prefix}:uids:next"

    def idempotency(self, owner: str, key: str) -> str:
        return f"{self.prefix}:idem:{owner}:{key}"

    def index(self, owner: str | None = None) -> str:
        """A sorted set of task ids by creation order: all, or one owner's."""
        return f"{self.prefix}:tasks" if owner is None else f"{self.prefix}:tasks:owner:{owner}"

    def by_state(self, owner: str | None = None) -> str:
        """A sorted set of task ids by state, then creation order (its scores:
        :mod:`shared.state_scores`): all, or one owner's.  The move script names it
        from :meth:`index` and :data:`BY_STATE_SUFFIX` the same way."""
        return f"{self.index(owner)}{BY_STATE_SUFFIX}"

    def old_state_index(self, state: str, owner: str | None = None) -> str:
        """A sorted set per state, as tasks were indexed before :meth:`by_state` (read
        only to adopt its members: ``TaskStore.adopt_old_state_indexes``)."""
        return f"{self.index(owner)}:state:{state}"

    def state_indexes_adopted(self) -> str:
        """Set once the indexes of one state each have been moved into the by-state ones."""
        return f"{self.prefix}:adopted:by-state"

    def expiry(self) -> str:
        """Finished task ids by the time they expire (retention)."""
        return f"{self.prefix}:expiry"

    def task_seq(self) -> str:
        """The counter that orders tasks in the indexes."""
        return f"{self.prefix}:seq"

    def project_index(self, project: str) -> str:
        """A sorted set of one project's task ids by creation order, written at creation."""
        return f"{self.prefix}:tasks:project:{project}"

    # --- policy --------------------------------------------------------------------------

    def _policy(self, scope: str) -> str:
        """The platform's policy keys as they always were; a project's under the project."""
        if scope == "platform":
            return f"{self.prefix}:policy"
        return f"{self.project(scope.removeprefix('project:'))}:policy"

    def policy_seq(self, scope: str = "platform") -> str:
        return f"{self._policy(scope)}:seq"

    def policy_version(self, version: int | str = "", scope: str = "platform") -> str:
        """One immutable version; without a number, the stem the store's script completes."""
        return f"{self._policy(scope)}:v:{version}"

    def policy_current(self, scope: str = "platform") -> str:
        return f"{self._policy(scope)}:current"

    # --- projects ------------------------------------------------------------------------

    def project(self, name: str) -> str:
        """A project's record (JSON): members, maintainers, who made it and when."""
        return f"{self.prefix}:project:{name}"

    def projects(self) -> str:
        """The set of every project's name."""
        return f"{self.prefix}:projects"

    def owner_projects(self, owner: str) -> str:
        """The set of projects an owner is a member or maintainer of."""
        return f"{self.prefix}:owner:{owner}:projects"

    # --- tokens, audit, authentication ---------------------------------------------------

    def token(self, digest: str) -> str:
        """A token's identity, under the token's SHA-256 digest, never the token."""
        return f"{self.prefix}:token:{digest}"

    def token_ids(self) -> str:
        """Token id -> digest, so an admin can list and revoke by id."""
        return f"{self.prefix}:tokens"

    def audit(self) -> str:
        return f"{self.prefix}:audit"

    def auth_failures(self, address: str) -> str:
        """Failed authentications from one address in the current minute."""
        return f"{self.prefix}:authfail:{address}"

    def auth_failures_of_token(self, prefix_digest: str) -> str:
        """Failed authentications with tokens beginning alike (by the SHA-256 digest of
        that beginning, never the characters themselves), in the current minute."""
        return f"{self.prefix}:authfail-token:{prefix_digest}"

    def session(self, digest: str) -> str:
        """A console session (a hash), under the SHA-256 digest of its id, never the id."""
        return f"{self.prefix}:session:{digest}"

    def token_sessions(self, token_id: str) -> str:
        """The digests of the console sessions opened with one token, ended with it."""
        return f"{self.prefix}:token-sessions:{token_id}"

    # --- quotas --------------------------------------------------------------------------

    def quota_bytes(self, subject: str = "user:") -> str:
        """Bytes a subject's task records take in Redis (a counter kept by the store's
        scripts); without a name after ``user:``, the stem the move script completes."""
        return f"{self.prefix}:quota:bytes:{subject}"

    def extra_replicas(self, owner: str) -> str:
        """A counter: the replicas beyond each task's first in the owner's unfinished tasks.

        Kept by the scripts that move tasks between states (``shared.store.scripts``, which
        name it the same way), so unfinished replicas are this plus the tasks counted."""
        return f"{self.index(owner)}:extra-replicas"

    def quota_creates(self, subject: str, window: int) -> str:
        """Tasks a subject (``user:<owner>``) created in one minute window (a counter)."""
        return f"{self.prefix}:quota:creates:{subject}:{window}"

    # --- insights ------------------------------------------------------------------------

    def insights_states(self, day: int, project: str | None = None) -> str:
        """Revisions that entered each state on one UTC day (a hash: state -> count)."""
        return f"{self._insights(day, project)}:states"

    def insights_rejections(self, day: int, project: str | None = None) -> str:
        """Rejected revisions on one UTC day by the rule and variable that refused them
        (a hash: JSON ``[rule, variable]`` -> count); names only, never a value."""
        return f"{self._insights(day, project)}:rejections"

    def insights_near_misses(self, day: int, project: str | None = None) -> str:
        """Names the doctor took for typos on one UTC day (a hash: JSON ``[typed, likely]``
        -> count); names only, never a value."""
        return f"{self._insights(day, project)}:near_misses"

    # --- the doctor's catalog ------------------------------------------------------------

    def catalog(self, scope: str) -> str:
        """One layer's edited catalog entries (a hash: name -> JSON entry); ``scope`` is
        ``platform`` or ``project:<name>``."""
        return f"{self.prefix}:catalog:{scope}"

    def catalog_settings(self) -> str:
        """The catalog's settings (a hash): ``builtin`` on or off."""
        return f"{self.prefix}:catalog-settings"

    def insights_project_stem(self, day: int) -> str:
        """What a project's insights keys for ``day`` begin with: the task store's move
        script, which learns the project inside Redis, appends ``<project>:states``."""
        return f"{self.prefix}:insights:{day}:project:"

    def _insights(self, day: int, project: str | None) -> str:
        if project is None:
            return f"{self.prefix}:insights:{day}:all"
        return f"{self.insights_project_stem(day)}{project}"

    # --- secret keys ---------------------------------------------------------------------

    def secret_keys_in_use(self) -> str:
        """A set: the fingerprints (``shared.secrets.key_fingerprints``, never a key) of
        the secret keys a stored value may be sealed with (``shared.keyring``)."""
        return f"{self.prefix}:secret-keys"

    # --- workers -------------------------------------------------------------------------

    def reconciler_lock(self) -> str:
        return f"{self.prefix}:reconciler:lock"

    def reconciler_last_pass(self) -> str:
        """When a reconciler last finished a pass (epoch seconds); expires when none runs."""
        return f"{self.prefix}:reconciler:last-pass"

    def consumers(self, queue: str) -> str:
        """The workers consuming ``queue``: a sorted set of worker names by the time their
        liveness expires.  One key per queue, so readiness reads it without a SCAN."""
        return f"{self.prefix}:consumers:{queue}"

    def celery_prefix(self) -> str:
        """What kombu puts before each of its keys (``global_keyprefix``)."""
        return f"{self.prefix}:celery:"

    def queue(self, name: str) -> str:
        """The list kombu keeps a Celery queue's waiting messages in."""
        return f"{self.celery_prefix()}{name}"
