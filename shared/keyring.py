"""Which secret keys the platform's stored secrets may be sealed with, by fingerprint.

A process that seals or opens secrets (the API, the stage workers) without every key a
stored value may be sealed with fails that value's task later, in the middle of its
launch.  So the platform keeps, in Redis, the fingerprints of those keys
(:func:`shared.secrets.key_fingerprints`: a key's HMAC, never the key), and a process
joins only if it holds each of them:

* the first process of a platform records the key it seals with (its first); a
  platform whose processes have no keys records nothing, and refuses secret variables
  at creation, as it always did;
* a process holding every recorded key joins and adds its first key (it will seal with
  it): a rotation's new key, put first beside the old ones, is recorded this way;
* a process lacking one is refused (:mod:`workers.startup`): no keys, or other keys;
* ``python -m api.cli rotate-secrets``, once every value is sealed with the first key,
  leaves that key alone in the record, so the old keys may go.

The check and the addition are one script: two processes with different keys starting
at once on a new platform cannot both join.
"""

from __future__ import annotations

import redis

from shared.keys import Keys

# KEYS[1]: the record; ARGV[1]: the key this process seals with ("" for none); ARGV[2..]:
# every key it holds.  Returns the recorded fingerprints it lacks; adds ARGV[1] if none
# (writing nothing when it is there: a process restarting on a full Redis still starts).
_JOIN = """
local held = {}
for i = 2, #ARGV do held[ARGV[i]] = true end
local missing = {}
for _, recorded in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if not held[recorded] then table.insert(missing, recorded) end
end
if #missing == 0 and ARGV[1] ~= '' and redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then
  redis.call('SADD', KEYS[1], ARGV[1])
end
table.sort(missing)
return missing
"""


def join(client: redis.Redis, keys: Keys, fingerprints: list[str]) -> list[str]:
    """The recorded fingerprints a process holding ``fingerprints`` (its keys', first the
    one it seals with) lacks; when it lacks none, its first key is recorded."""
    first = fingerprints[0] if fingerprints else ""
    missing = client.eval(_JOIN, 1, keys.secret_keys_in_use(), first, *fingerprints)
    return [m.decode() if isinstance(m, bytes) else str(m) for m in missing or []]


def recorded(client: redis.Redis, keys: Keys) -> set[str]:
    """The fingerprints the record holds."""
    return {m.decode() if isinstance(m, bytes) else str(m)
            for m in client.smembers(keys.secret_keys_in_use())}  # type: ignore[union-attr]


def sealed_with_only(client: redis.Redis, keys: Keys, fingerprint: str) -> None:
    """Every stored value is sealed with this key now: the record holds it alone."""
    pipe = client.pipeline(transaction=True)
    pipe.delete(keys.secret_keys_in_use())
    pipe.sadd(keys.secret_keys_in_use(), fingerprint)
    pipe.execute()
