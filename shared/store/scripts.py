"""The Lua scripts behind :class:`shared.store.tasks.TaskStore`, each one atomic in Redis.

They are kept apart from the store's Python so each reads on its own; the store
registers them once per client.
"""

# A record is two hashes: the task's (small fields: name, owner, state, revision, ...)
# and its current revision's (env, resolved env, errors, outcome).  Every field holds
# JSON, except the scripts' own counters ``v`` (writes) and ``seq`` (creation order).
# A state change writes only the fields it changes, so its cost never depends on how
# many revisions a task has had or how big their env was.

# Counts a revision entering a state in the day's insights (shared.store.insights): the
# count is part of the write it follows, so it costs no round trip of its own.  A day's
# counter is given its expiry when the count begins (the first entry of a state that day).
COUNT_ENTRY = """
local function count_entry(all_key, project_key, state, ttl)
  for _, key in ipairs({all_key, project_key}) do
    if key ~= '' and redis.call('HINCRBY', key, state, 1) == 1 then
      redis.call('EXPIRE', key, ttl)
    end
  end
end
"""

# A task's score in the by-state indexes (shared.state_scores): its state's base plus its
# creation number, written as an integer (Lua's own number format keeps 14 digits).
SCORED = """
local function scored(state_base, seq)
  return string.format('%.0f', state_base + tonumber(seq))
end
"""

# Stored bytes: what a task's record takes (its hash, its revisions' hashes and its value
# pool, each field's name and value; not the scripts' own fields ``v``, ``seq``, ``bytes``
# and ``bytes_allowed``) and the bytes its revisions' logs keep (counted by the log's
# append, shared.store.logtail) is kept in the task's ``bytes`` field and summed per owner
# under the owner's counter (shared.access.quotas): deleting the task takes it all off.
# Every script that writes a record knows the size of what it replaces before writing, so
# the counter is always what a recount would find: from the values it read itself (MOVE),
# from the sizes its caller read at the write counter ``v`` the script checks (UPDATE:
# every writer of a task's hashes moves ``v``, so an unchanged ``v`` means unchanged
# sizes), or else measured (HSTRLEN, O(1) per field).  A record written before counting
# began has no ``bytes``: the first script that touches it measures it whole, once
# (``adopt``), and counts it from then on.
BYTES = """
local UNCOUNTED = {v = true, seq = true, bytes = true, bytes_allowed = true}
local function grow(key, list, from, to)
  local delta = 0
  for i = from, to, 2 do
    local f = list[i]
    if not UNCOUNTED[f] then
      local old = 0
      if key ~= '' then old = redis.call('HSTRLEN', key, f) end
      if old == 0 then delta = delta + #f end
      delta = delta + #list[i + 1] - old
    end
  end
  return delta
end
-- ``grow`` with the old sizes given: sizes[k] for the k-th pair (-1: measure it).
local function grow_sized(key, list, from, to, sizes, first)
  local delta, k = 0, first
  for i = from, to, 2 do
    local f = list[i]
    if not UNCOUNTED[f] then
      local old = tonumber(sizes[k])
      if old < 0 then old = redis.call('HSTRLEN', key, f) end
      if old == 0 then delta = delta + #f end
      delta = delta + #list[i + 1] - old
    end
    k = k + 1
  end
  return delta
end
-- ``grow`` against old values read: old[f] is the stored value of f (false: none).
local function grow_from(old, list, from, to)
  local delta = 0
  for i = from, to, 2 do
    local f = list[i]
    local was = old[f]
    if was then delta = delta + #list[i + 1] - #was
    else delta = delta + #f + #list[i + 1] end
  end
  return delta
end
local function whole(key)
  local all = redis.call('HGETALL', key)
  return grow('', all, 1, #all)
end
local function adopt(task, suffix, revision, pool)
  local size = whole(task) + whole(pool)
  if revision then
    for n = 1, tonumber(cjson.decode(revision)) do size = size + whole(task .. suffix .. n) end
  end
  return size
end
local function count(key, delta)
  if delta == 0 or key == '' then return end
  if redis.call('INCRBY', key, delta) <= 0 then redis.call('DEL', key) end
end
"""

# KEYS: 1 task, 2 first revision, 3 idem (or ""), 4 all-index, 5 owner-index,
#       6 by-state index, 7 owner's by-state index, 8 seq, 9 project-index (or ""), 10
#       insights key of every task, 11 insights key of the project (or ""), 12 audit stream
#       (or ""), 13 the task's value pool, 14 the owner's stored-bytes counter, 15 the
#       owner's creations this minute (or "": not counted), 16 the owner's extra-replicas
#       counter
# ARGV: 1 id, 2 idem-ttl, 3 number of task fields n, 4 the state, 5 insights TTL, 6 audit
#       stream length, 7 number of audit fields and values m (twice the pairs), 8
#       creations per minute allowed, 9 the creations counter's TTL, 10 unfinished
#       replicas allowed (0: not counted), 11 stored bytes allowed (0: no limit), 12 number
#       of revision pairs r, 13 the task's replicas, 14 the state's score base in the
#       by-state indexes, 15 where the scores of final states begin, then the audit fields
#       and values (m), n task pairs, r revision pairs, the pool's id/value pairs
# Both count quotas count replicas: a task of k replicas is k creations and k unfinished
# (the by-state index counts each task once, the extra-replicas counter the other k-1).
# Returns {0, id} for a key used before (nothing counted), {-1, created, unfinished} or
# {-2, stored, size} when a quota refuses (nothing stored; shared.access.quotas words the
# refusal), {1, id} once stored.
CREATE = COUNT_ENTRY + BYTES + SCORED + """
local task, first_revision, idem = KEYS[1], KEYS[2], KEYS[3]
local by_time = {KEYS[4], KEYS[5]}  -- all, owner
local by_state = {KEYS[6], KEYS[7]}  -- all, owner
local seq_key, project_index = KEYS[8], KEYS[9]
local insights_all, insights_project, audit_stream = KEYS[10], KEYS[11], KEYS[12]
local pool, stored_key, created_key, extra_key = KEYS[13], KEYS[14], KEYS[15], KEYS[16]
local id, idem_ttl, state, insights_ttl = ARGV[1], ARGV[2], ARGV[4], ARGV[5]
local n, audit_len, m = tonumber(ARGV[3]), ARGV[6], tonumber(ARGV[7])
local creations_allowed, creations_ttl = tonumber(ARGV[8]), ARGV[9]
local unfinished_allowed, bytes_allowed = tonumber(ARGV[10]), tonumber(ARGV[11])
local r, replicas = tonumber(ARGV[12]), tonumber(ARGV[13])
local state_base, unfinished_end = tonumber(ARGV[14]), ARGV[15]
local AUDIT_FIRST = 16  -- ARGV[16..]: the audit pairs, then the task's, revision's, pool's

if idem ~= '' then
  local existing = redis.call('GET', idem)
  -- A write even on a retry: WAIT after it then vouches for the first call's writes too
  -- (replication is in order), so a retry completes what an unacknowledged call left.
  if existing then redis.call('EXPIRE', idem, idem_ttl); return {0, existing} end
end
local created, unfinished = 0, 0
if created_key ~= '' then
  created = redis.call('INCRBY', created_key, replicas)
  if created == replicas then redis.call('EXPIRE', created_key, creations_ttl) end
end
local counts_unfinished = unfinished_allowed > 0
if counts_unfinished then
  unfinished = tonumber(redis.call('GET', extra_key) or '0')
    + redis.call('ZCOUNT', by_state[2], 0, '(' .. unfinished_end)
end
if (created_key ~= '' and created > creations_allowed)
    or (counts_unfinished and unfinished + replicas > unfinished_allowed) then
  return {-1, created, unfinished}
end
local tf = AUDIT_FIRST + m   -- the task's pairs
local rf = tf + 2 * n        -- the first revision's pairs
local pf = rf + 2 * r        -- the pool's id/value pairs
local size = grow('', ARGV, tf, rf - 1) + grow('', ARGV, rf, pf - 1) + grow('', ARGV, pf, #ARGV)
local stored = tonumber(redis.call('GET', stored_key) or '0')
if bytes_allowed > 0 and stored + size > bytes_allowed then
  return {-2, stored, size}
end
if replicas > 1 then redis.call('INCRBY', extra_key, replicas - 1) end
local seq = redis.call('INCR', seq_key)
-- ``bytes_allowed``: the limit the task's logs are held to as they grow (0: none), read by
-- the log's append (shared.store.logtail).
redis.call('HSET', task, 'v', 1, 'seq', seq, 'bytes', size, 'bytes_allowed', bytes_allowed,
           unpack(ARGV, tf, rf - 1))
if r > 0 then redis.call('HSET', first_revision, unpack(ARGV, rf, pf - 1)) end
if #ARGV >= pf then redis.call('HSET', pool, unpack(ARGV, pf, #ARGV)) end
count(stored_key, size)
for _, index in ipairs(by_time) do redis.call('ZADD', index, seq, id) end
for _, index in ipairs(by_state) do redis.call('ZADD', index, scored(state_base, seq), id) end
if project_index ~= '' then redis.call('ZADD', project_index, seq, id) end
if idem ~= '' then redis.call('SET', idem, id, 'EX', idem_ttl) end
count_entry(insights_all, insights_project, state, insights_ttl)
if audit_stream ~= '' then
  redis.call('XADD', audit_stream, 'MAXLEN', '~', audit_len, '*',
             unpack(ARGV, AUDIT_FIRST, AUDIT_FIRST - 1 + m))
end
return {1, id}
"""

# KEYS: 1 task, 2 revision, 3 by-state index, 4 the owner's by-state index, 5 expiry, 6
#       insights key of every task (or "": not counted), 7 insights key of the task's
#       project (or ""), 8 the task's value pool, 9 the owner's stored-bytes counter, 10
#       the owner's extra-replicas counter
# ARGV: 1 expected v, 2 id, 3 expires-at (0: leave the expiry index be; "leave": the task
#       leaves a final state), 4 number of task fields n, 5 the state entered, 6 insights
#       TTL, 7 stored bytes allowed (0: not judged: a stage's write, which must land), 8
#       number of revision pairs r, 9 the revision key's suffix, 10 the change to the
#       extra-replicas counter (a task of several replicas ending or reopening), 11 the
#       new state's score base in the by-state indexes ("": the state is unchanged), then
#       the stored size of each of the n task fields and r revision fields as the caller
#       read them at v (-1: not read, measured here), n task field/value pairs, r revision
#       pairs, the pool's id/value pairs
# Returns 0 if the task moved on meanwhile, {-2, stored, growth} when the owner's stored
# bytes would pass the limit (nothing written), 1 once written.
UPDATE = COUNT_ENTRY + BYTES + SCORED + """
local task, revision, by_state, owner_by_state = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local expiry, insights_all, insights_project, pool = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local stored_key, extra_key = KEYS[9], KEYS[10]
local expected_v, id, expires_at = ARGV[1], ARGV[2], ARGV[3]
local n, state, insights_ttl = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local bytes_allowed, r = tonumber(ARGV[7]), tonumber(ARGV[8])
local revision_suffix, extra_change, state_base = ARGV[9], ARGV[10], ARGV[11]
local SIZES = 12            -- ARGV[12..]: the n + r old sizes
local tf = SIZES + n + r     -- the task's pairs
local rf = tf + 2 * n        -- the revision's pairs
local pf = rf + 2 * r        -- the pool's id/value pairs

local t = redis.call('HMGET', task, 'v', 'seq', 'bytes', 'revision')
local v, seq, had, current = t[1], t[2], tonumber(t[3]), t[4]
if v ~= expected_v then return 0 end
local adopted = 0
if not had then
  adopted = adopt(task, revision_suffix, current, pool)
  had = adopted
end
local delta = grow_sized(task, ARGV, tf, rf - 1, ARGV, SIZES)
  + grow_sized(revision, ARGV, rf, pf - 1, ARGV, SIZES + n) + grow(pool, ARGV, pf, #ARGV)
if bytes_allowed > 0 and delta > 0 then
  local stored = tonumber(redis.call('GET', stored_key) or '0') + adopted
  if stored + delta > bytes_allowed then return {-2, stored, delta} end
end
redis.call('HSET', task, 'v', tonumber(v) + 1, 'bytes', had + delta, unpack(ARGV, tf, rf - 1))
if r > 0 then redis.call('HSET', revision, unpack(ARGV, rf, pf - 1)) end
if #ARGV >= pf then redis.call('HSET', pool, unpack(ARGV, pf, #ARGV)) end
count(stored_key, adopted + delta)
if extra_change ~= '0' then redis.call('INCRBY', extra_key, extra_change) end
if state_base ~= '' then
  local scored_now = scored(tonumber(state_base), seq)
  redis.call('ZADD', by_state, scored_now, id)
  redis.call('ZADD', owner_by_state, scored_now, id)
end
if expires_at == 'leave' then redis.call('ZREM', expiry, id)
elseif expires_at ~= '0' then redis.call('ZADD', expiry, expires_at, id) end
if insights_all ~= '' then count_entry(insights_all, insights_project, state, insights_ttl) end
return 1
"""

# A state change decided by the state alone (launching, running, an outcome, a cancel):
# checked and written in one call, without reading the record.
# KEYS: task, expiry, insights key of every task, the revision's log
# ARGV: 1 revision (JSON), 2 new state, 3 allowed old states (comma-separated), 4 final
#       states (comma-separated), 5 now (JSON), 6 expires-at (0: kept forever), 7 the
#       revision key's suffix, 8 the index key prefix, 9 the insights key prefix of a
#       project, 10 insights TTL, 11 the event (JSON), 12 id, 13 "1" to return the record
#       as moved (or "0"), 14 what an owner's stored-bytes counter key begins with, 15 the
#       value pool's suffix, 16 the new state's score base in the by-state indexes, 17 the
#       by-state indexes' suffix, then revision field/value pairs
# Returns false if the task is gone, {0} if it is elsewhere, {2} if it is stored in the
# layout of before revisions had their own keys, {1, project} once moved, or
# {1, project, task fields, revision fields, pool values} when asked for the record.
MOVE = COUNT_ENTRY + BYTES + SCORED + """
local task, expiry, insights_all, log = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local revision_json, new, allowed, final = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local now, expires_at, revision_suffix, index_prefix = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local project_insights_prefix, insights_ttl, event, id = ARGV[9], ARGV[10], ARGV[11], ARGV[12]
local answer_record, stored_prefix, pool_suffix = ARGV[13], ARGV[14], ARGV[15]
local state_base, by_state_suffix = tonumber(ARGV[16]), ARGV[17]
local CHANGES = 18  -- ARGV[18..]: the revision's field/value pairs

local t = redis.call('HMGET', task, 'v', 'state', 'revision', 'owner', 'seq', 'project',
                     'bytes', 'replicas', 'updated_at')
local v, stored_state, current, stored_owner = t[1], t[2], t[3], t[4]
local seq, stored_project, had, replicas = t[5], t[6], tonumber(t[7]), t[8]
if not v then return false end
if not current then return {2} end
if current ~= revision_json then return {0} end
local old = cjson.decode(stored_state)
local function member(list, x)
  for s in string.gmatch(list, '[^,]+') do if s == x then return true end end
  return false
end
if not member(allowed, old) then return {0} end
local state = cjson.encode(new)
local rev = task .. revision_suffix .. revision_json
local pool = task .. pool_suffix
local owner = cjson.decode(stored_owner)
local adopted = 0
if not had then
  adopted = adopt(task, revision_suffix, current, pool)
  had = adopted
end
local mine = {'state', state, 'updated_at', now}
-- What this move replaces in the revision's hash, read whole: its sizes are counted
-- from these values, and none is large (states, times, events, an outcome's fields).
local rev_names = {'events', 'started_at', 'state', 'updated_at', 'ended_at'}
for i = CHANGES, #ARGV, 2 do rev_names[#rev_names + 1] = ARGV[i] end
local r = redis.call('HMGET', rev, unpack(rev_names))
local rev_old = {}
for i, name in ipairs(rev_names) do rev_old[name] = r[i] end
local events, started_at = r[1], r[2]
if not events or events == '[]' or events == 'null' then events = '[' .. event .. ']'
else events = string.sub(events, 1, -2) .. ',' .. event .. ']' end
local fields = {'state', state, 'updated_at', now, 'events', events}
for i = CHANGES, #ARGV do fields[#fields + 1] = ARGV[i] end
if member(final, new) then
  fields[#fields + 1] = 'ended_at'
  fields[#fields + 1] = now
elseif new == 'running' and (not started_at or started_at == 'null' or started_at == '0') then
  fields[#fields + 1] = 'started_at'
  fields[#fields + 1] = now
end
local delta = grow_from({state = stored_state, updated_at = t[9]}, mine, 1, #mine)
  + grow_from(rev_old, fields, 1, #fields)
redis.call('HSET', task, 'v', tonumber(v) + 1, 'bytes', had + delta, unpack(mine))
redis.call('HSET', rev, unpack(fields))
count(stored_prefix .. owner, adopted + delta)
if old ~= new then
  -- A task of several replicas that ends gives back the replicas beyond its first.
  local extra = (replicas and tonumber(replicas) or 1) - 1
  if extra > 0 and member(final, new) and not member(final, old) then
    redis.call('DECRBY', index_prefix .. ':owner:' .. owner .. ':extra-replicas', extra)
  end
  local scored_now = scored(state_base, seq)
  redis.call('ZADD', index_prefix .. by_state_suffix, scored_now, id)
  redis.call('ZADD', index_prefix .. ':owner:' .. owner .. by_state_suffix, scored_now, id)
end
if expires_at ~= '0' then redis.call('ZADD', expiry, expires_at, id)
elseif member(final, old) then redis.call('ZREM', expiry, id) end
local project = stored_project and stored_project ~= 'null' and cjson.decode(stored_project)
  or false
count_entry(insights_all, project and (project_insights_prefix .. project .. ':states') or '',
            new, insights_ttl)
-- A revision that ends has its log written anew, at its own size: appends leave a string
-- up to twice its length allocated (Redis grows one ahead), kept until the task expires.
if member(final, new) and not member(final, old) and log then
  local text = redis.call('GET', log)
  if text then redis.call('SET', log, text) end
end
if answer_record == '1' then
  local revfields = redis.call('HGETALL', rev)
  return {1, project, redis.call('HGETALL', task), revfields, pooled(revfields, pool)}
end
return {1, project}
"""

# The values a revision's lists refer to in the task's pool: the revision's ``refs``
# field (a JSON list of ids), read from the pool in the same call.
POOLED = """
local function pooled(revfields, pool)
  for i = 1, #revfields, 2 do
    if revfields[i] == 'refs' then
      local ids = cjson.decode(revfields[i + 1])
      if #ids == 0 then return {} end
      return redis.call('HMGET', pool, unpack(ids))
    end
  end
  return {}
end
"""
MOVE = POOLED + MOVE

# KEYS: task; ARGV: the revision key's suffix, the value pool's suffix.  One round trip
# for a whole record: the task's fields, its current revision's, the pool values those
# refer to.
READ = POOLED + """
local task, revision_suffix, pool_suffix = KEYS[1], ARGV[1], ARGV[2]
local t = redis.call('HGETALL', task)
if #t == 0 then return false end
for i = 1, #t, 2 do
  if t[i] == 'revision' then
    local revfields = redis.call('HGETALL', task .. revision_suffix .. t[i + 1])
    return {t, revfields, pooled(revfields, task .. pool_suffix)}
  end
end
return {t, {}, {}}
"""

# KEYS: expiry, the n index keys, the task, then the task's other keys
# ARGV: expected v, id, n, the owner's stored-bytes counter.  Deletes a finished task
# whole, unless it changed meanwhile, and takes its bytes off its owner's count.
DELETE = BYTES + """
local expected_v, id, n, stored_key = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local task = KEYS[n + 2]  -- KEYS[1]: expiry, KEYS[2..n+1]: the indexes, then the task's keys
local t = redis.call('HMGET', task, 'v', 'bytes')
if t[1] ~= expected_v then return 0 end
for i = 1, n + 1 do redis.call('ZREM', KEYS[i], id) end
count(stored_key, -(tonumber(t[2]) or 0))
redis.call('DEL', unpack(KEYS, n + 2, #KEYS))
return 1
"""

# A rewrite of one hash of a record outside the scripts above (secrets sealed again with
# a new key), counted like any other, and a write like any other: it moves the task's
# ``v``, so an UPDATE prepared from an earlier read (and its sizes) is refused and redone.
# KEYS: the hash, the task, the owner's stored-bytes counter; ARGV: field/value pairs.  A
# record not yet counted stays uncounted.
WRITE = BYTES + """
local hash, task, stored_key = KEYS[1], KEYS[2], KEYS[3]
local delta = grow(hash, ARGV, 1, #ARGV)
redis.call('HSET', hash, unpack(ARGV))
if redis.call('EXISTS', task) == 1 then redis.call('HINCRBY', task, 'v', 1) end
if redis.call('HEXISTS', task, 'bytes') == 1 then
  redis.call('HINCRBY', task, 'bytes', delta)
  count(stored_key, delta)
end
return delta
"""

# Up to ARGV[2] members of an index of one state, as tasks were indexed before the by-state
# indexes, moved into the by-state index of the same scope, each scored by its state's base
# (ARGV[1]) plus its old score (its creation number).  Popped and added in one call, so no
# member is ever in neither.  KEYS: the old index, the by-state index.  Returns how many
# are left in the old index (0: it is gone).
ADOPT_STATE_INDEX = SCORED + """
local old, by_state = KEYS[1], KEYS[2]
local state_base, most = tonumber(ARGV[1]), tonumber(ARGV[2])
local popped = redis.call('ZPOPMIN', old, most)
for i = 1, #popped, 2 do
  redis.call('ZADD', by_state, scored(state_base, popped[i + 1]), popped[i])
end
return redis.call('ZCARD', old)
"""
