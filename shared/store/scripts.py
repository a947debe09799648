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

# Stored bytes: what a task's record takes (its hash, its revisions' hashes and its value
# pool, each field's name and value; not the scripts' counters ``v``, ``seq`` and ``bytes``)
# is kept in the task's ``bytes`` field and summed per owner under the owner's counter
# (shared.access.quotas).  Every script that writes a record measures what it changes
# before writing (HSTRLEN, O(1) per field), so the counter is always what a recount
# would find.  A record written before counting began has no ``bytes``: the first script
# that touches it measures it whole, once (``adopt``), and counts it from then on.
BYTES = """
local UNCOUNTED = {v = true, seq = true, bytes = true}
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
#       6 state-index, 7 owner-state-index, 8 seq, 9 project-index (or ""), 10 insights key
#       of every task, 11 insights key of the project (or ""), 12 audit stream (or ""),
#       13 the task's value pool, 14 the owner's stored-bytes counter, 15 the owner's
#       creations this minute (or "": not counted), 16 the owner's extra-replicas counter,
#       then the owner's unfinished-state indexes (none: not counted)
# ARGV: 1 id, 2 idem-ttl, 3 number of task fields n, 4 the state, 5 insights TTL, 6 audit
#       stream length, 7 number of audit fields and values m (twice the pairs), 8
#       creations per minute allowed, 9 the creations counter's TTL, 10 unfinished
#       replicas allowed, 11 stored bytes allowed (0: no limit), 12 number of revision
#       pairs r, 13 the task's replicas, then the audit fields and values (m), n task
#       pairs, r revision pairs, the pool's id/value pairs
# Both count quotas count replicas: a task of k replicas is k creations and k unfinished
# (the unfinished indexes count each task once, the extra-replicas counter the other k-1).
# Returns {0, id} for a key used before (nothing counted), {-1, created, unfinished} or
# {-2, stored, size} when a quota refuses (nothing stored; shared.access.quotas words the
# refusal), {1, id} once stored.
CREATE = COUNT_ENTRY + BYTES + """
if KEYS[3] ~= '' then
  local existing = redis.call('GET', KEYS[3])
  if existing then return {0, existing} end
end
local created, unfinished = 0, 0
local replicas = tonumber(ARGV[13])
if KEYS[15] ~= '' then
  created = redis.call('INCRBY', KEYS[15], replicas)
  if created == replicas then redis.call('EXPIRE', KEYS[15], ARGV[9]) end
end
if #KEYS > 16 then
  unfinished = tonumber(redis.call('GET', KEYS[16]) or '0')
  for i = 17, #KEYS do unfinished = unfinished + redis.call('ZCARD', KEYS[i]) end
end
if (KEYS[15] ~= '' and created > tonumber(ARGV[8]))
    or (#KEYS > 16 and unfinished + replicas > tonumber(ARGV[10])) then
  return {-1, created, unfinished}
end
local n, m, r = tonumber(ARGV[3]), tonumber(ARGV[7]), tonumber(ARGV[12])
local tf = 14 + m
local rf = tf + 2 * n
local pf = rf + 2 * r
local size = grow('', ARGV, tf, rf - 1) + grow('', ARGV, rf, pf - 1) + grow('', ARGV, pf, #ARGV)
local stored = tonumber(redis.call('GET', KEYS[14]) or '0')
if tonumber(ARGV[11]) > 0 and stored + size > tonumber(ARGV[11]) then
  return {-2, stored, size}
end
if replicas > 1 then redis.call('INCRBY', KEYS[16], replicas - 1) end
local seq = redis.call('INCR', KEYS[8])
redis.call('HSET', KEYS[1], 'v', 1, 'seq', seq, 'bytes', size, unpack(ARGV, tf, rf - 1))
if r > 0 then redis.call('HSET', KEYS[2], unpack(ARGV, rf, pf - 1)) end
if #ARGV >= pf then redis.call('HSET', KEYS[13], unpack(ARGV, pf, #ARGV)) end
count(KEYS[14], size)
for i = 4, 7 do redis.call('ZADD', KEYS[i], seq, ARGV[1]) end
if KEYS[9] ~= '' then redis.call('ZADD', KEYS[9], seq, ARGV[1]) end
if KEYS[3] ~= '' then redis.call('SET', KEYS[3], ARGV[1], 'EX', ARGV[2]) end
count_entry(KEYS[10], KEYS[11], ARGV[4], ARGV[5])
if KEYS[12] ~= '' then
  redis.call('XADD', KEYS[12], 'MAXLEN', '~', ARGV[6], '*', unpack(ARGV, 14, 13 + m))
end
return {1, ARGV[1]}
"""

# KEYS: 1 task, 2 revision, 3 old-state-index, 4 new-state-index, 5 old-owner-state-index,
#       6 new-owner-state-index, 7 expiry, 8 insights key of every task (or "": not
#       counted), 9 insights key of the task's project (or ""), 10 the task's value pool,
#       11 the owner's stored-bytes counter, 12 the owner's extra-replicas counter
# ARGV: 1 expected v, 2 id, 3 expires-at (0: leave the expiry index be; "leave": the task
#       leaves a final state), 4 number of task fields n, 5 the state entered, 6 insights
#       TTL, 7 stored bytes allowed (0: not judged: a stage's write, which must land), 8
#       number of revision pairs r, 9 the revision key's suffix, 10 the change to the
#       extra-replicas counter (a task of several replicas ending or reopening), then n
#       task field/value pairs, r revision pairs, the pool's id/value pairs
# Returns 0 if the task moved on meanwhile, {-2, stored, growth} when the owner's stored
# bytes would pass the limit (nothing written), 1 once written.
UPDATE = COUNT_ENTRY + BYTES + """
local t = redis.call('HMGET', KEYS[1], 'v', 'seq', 'bytes', 'revision')
local v = t[1]
if v ~= ARGV[1] then return 0 end
local n, r = tonumber(ARGV[4]), tonumber(ARGV[8])
local tf = 11
local rf = tf + 2 * n
local pf = rf + 2 * r
local adopted = 0
local had = tonumber(t[3])
if not had then
  adopted = adopt(KEYS[1], ARGV[9], t[4], KEYS[10])
  had = adopted
end
local delta = grow(KEYS[1], ARGV, tf, rf - 1) + grow(KEYS[2], ARGV, rf, pf - 1)
  + grow(KEYS[10], ARGV, pf, #ARGV)
if tonumber(ARGV[7]) > 0 and delta > 0 then
  local stored = tonumber(redis.call('GET', KEYS[11]) or '0') + adopted
  if stored + delta > tonumber(ARGV[7]) then return {-2, stored, delta} end
end
redis.call('HSET', KEYS[1], 'v', tonumber(v) + 1, 'bytes', had + delta,
           unpack(ARGV, tf, rf - 1))
if r > 0 then redis.call('HSET', KEYS[2], unpack(ARGV, rf, pf - 1)) end
if #ARGV >= pf then redis.call('HSET', KEYS[10], unpack(ARGV, pf, #ARGV)) end
count(KEYS[11], adopted + delta)
if ARGV[10] ~= '0' then redis.call('INCRBY', KEYS[12], ARGV[10]) end
if KEYS[3] ~= KEYS[4] then
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('ZREM', KEYS[5], ARGV[2])
  redis.call('ZADD', KEYS[4], t[2], ARGV[2])
  redis.call('ZADD', KEYS[6], t[2], ARGV[2])
end
if ARGV[3] == 'leave' then redis.call('ZREM', KEYS[7], ARGV[2])
elseif ARGV[3] ~= '0' then redis.call('ZADD', KEYS[7], ARGV[3], ARGV[2]) end
if KEYS[8] ~= '' then count_entry(KEYS[8], KEYS[9], ARGV[5], ARGV[6]) end
return 1
"""

# A state change decided by the state alone (launching, running, an outcome, a cancel):
# checked and written in one call, without reading the record.
# KEYS: task, expiry, insights key of every task
# ARGV: 1 revision (JSON), 2 new state, 3 allowed old states (comma-separated), 4 final
#       states (comma-separated), 5 now (JSON), 6 expires-at (0: kept forever), 7 the
#       revision key's suffix, 8 the index key prefix, 9 the insights key prefix of a
#       project, 10 insights TTL, 11 the event (JSON), 12 id, 13 "1" to return the record
#       as moved (or "0"), 14 what an owner's stored-bytes counter key begins with, 15 the
#       value pool's suffix, then revision field/value pairs
# Returns false if the task is gone, {0} if it is elsewhere, {2} if it is stored in the
# layout of before revisions had their own keys, {1, project} once moved, or
# {1, project, task fields, revision fields, pool values} when asked for the record.
MOVE = COUNT_ENTRY + BYTES + """
local t = redis.call('HMGET', KEYS[1], 'v', 'state', 'revision', 'owner', 'seq', 'project',
                     'bytes', 'replicas')
if not t[1] then return false end
if not t[3] then return {2} end
if t[3] ~= ARGV[1] then return {0} end
local old, new = cjson.decode(t[2]), ARGV[2]
local function member(list, x)
  for s in string.gmatch(list, '[^,]+') do if s == x then return true end end
  return false
end
if not member(ARGV[3], old) then return {0} end
local state = cjson.encode(new)
local rev = KEYS[1] .. ARGV[7] .. ARGV[1]
local pool = KEYS[1] .. ARGV[15]
local owner = cjson.decode(t[4])
local adopted = 0
local had = tonumber(t[7])
if not had then
  adopted = adopt(KEYS[1], ARGV[7], t[3], pool)
  had = adopted
end
local mine = {'state', state, 'updated_at', ARGV[5]}
local r = redis.call('HMGET', rev, 'events', 'started_at')
local events = r[1]
if not events or events == '[]' or events == 'null' then events = '[' .. ARGV[11] .. ']'
else events = string.sub(events, 1, -2) .. ',' .. ARGV[11] .. ']' end
local fields = {'state', state, 'updated_at', ARGV[5], 'events', events}
for i = 16, #ARGV do fields[#fields + 1] = ARGV[i] end
if member(ARGV[4], new) then
  fields[#fields + 1] = 'ended_at'
  fields[#fields + 1] = ARGV[5]
elseif new == 'running' and (not r[2] or r[2] == 'null' or r[2] == '0') then
  fields[#fields + 1] = 'started_at'
  fields[#fields + 1] = ARGV[5]
end
local delta = grow(KEYS[1], mine, 1, #mine) + grow(rev, fields, 1, #fields)
redis.call('HSET', KEYS[1], 'v', tonumber(t[1]) + 1, 'bytes', had + delta, unpack(mine))
redis.call('HSET', rev, unpack(fields))
count(ARGV[14] .. owner, adopted + delta)
if old ~= new then
  -- A task of several replicas that ends gives back the replicas beyond its first.
  local extra = (t[8] and tonumber(t[8]) or 1) - 1
  if extra > 0 and member(ARGV[4], new) and not member(ARGV[4], old) then
    redis.call('DECRBY', ARGV[8] .. ':owner:' .. owner .. ':extra-replicas', extra)
  end
  for _, pair in ipairs({{'ZREM', old}, {'ZADD', new}}) do
    local by_state = ARGV[8] .. ':state:' .. pair[2]
    local by_owner = ARGV[8] .. ':owner:' .. owner .. ':state:' .. pair[2]
    for _, key in ipairs({by_state, by_owner}) do
      if pair[1] == 'ZREM' then redis.call('ZREM', key, ARGV[12])
      else redis.call('ZADD', key, t[5], ARGV[12]) end
    end
  end
end
if ARGV[6] ~= '0' then redis.call('ZADD', KEYS[2], ARGV[6], ARGV[12])
elseif member(ARGV[4], old) then redis.call('ZREM', KEYS[2], ARGV[12]) end
local project = t[6] and t[6] ~= 'null' and cjson.decode(t[6]) or false
count_entry(KEYS[3], project and (ARGV[9] .. project .. ':states') or '', new, ARGV[10])
if ARGV[13] == '1' then
  local revfields = redis.call('HGETALL', rev)
  return {1, project, redis.call('HGETALL', KEYS[1]), revfields, pooled(revfields, pool)}
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
local t = redis.call('HGETALL', KEYS[1])
if #t == 0 then return false end
for i = 1, #t, 2 do
  if t[i] == 'revision' then
    local revfields = redis.call('HGETALL', KEYS[1] .. ARGV[1] .. t[i + 1])
    return {t, revfields, pooled(revfields, KEYS[1] .. ARGV[2])}
  end
end
return {t, {}, {}}
"""

# KEYS: expiry, the n index keys, the task, then the task's other keys
# ARGV: expected v, id, n, the owner's stored-bytes counter.  Deletes a finished task
# whole, unless it changed meanwhile, and takes its bytes off its owner's count.
DELETE = BYTES + """
local n = tonumber(ARGV[3])
local task = KEYS[n + 2]
local t = redis.call('HMGET', task, 'v', 'bytes')
if t[1] ~= ARGV[1] then return 0 end
for i = 1, n + 1 do redis.call('ZREM', KEYS[i], ARGV[2]) end
count(ARGV[4], -(tonumber(t[2]) or 0))
redis.call('DEL', unpack(KEYS, n + 2, #KEYS))
return 1
"""

# A rewrite of one hash of a record outside the scripts above (secrets sealed again with
# a new key), counted like any other.  KEYS: the hash, the task, the owner's stored-bytes
# counter; ARGV: field/value pairs.  A record not yet counted stays uncounted.
WRITE = BYTES + """
local delta = grow(KEYS[1], ARGV, 1, #ARGV)
redis.call('HSET', KEYS[1], unpack(ARGV))
if redis.call('HEXISTS', KEYS[2], 'bytes') == 1 then
  redis.call('HINCRBY', KEYS[2], 'bytes', delta)
  count(KEYS[3], delta)
end
return delta
"""
