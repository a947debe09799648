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

# KEYS: task, first revision, idem (or ""), all-index, owner-index, state-index,
#       owner-state-index, seq, project-index (or ""), insights key of every task,
#       insights key of the project (or ""), audit stream (or ""), the owner's creations
#       this minute (or "": not counted), then the owner's unfinished-state indexes (none:
#       not counted)
# ARGV: id, idem-ttl, number of task fields n, the state, insights TTL, audit stream
#       length, number of audit field/value pairs m, creations per minute allowed, the
#       creations counter's TTL, unfinished tasks allowed, m audit pairs, n task
#       field/value pairs, revision pairs
# Returns {0, id} for a key used before (nothing counted), {-1, created, unfinished} when
# a quota refuses (nothing stored; shared.access.quotas words the refusal), {1, id} once stored.
CREATE = COUNT_ENTRY + """
if KEYS[3] ~= '' then
  local existing = redis.call('GET', KEYS[3])
  if existing then return {0, existing} end
end
local created, unfinished = 0, 0
if KEYS[13] ~= '' then
  created = redis.call('INCR', KEYS[13])
  if created == 1 then redis.call('EXPIRE', KEYS[13], ARGV[9]) end
end
for i = 14, #KEYS do unfinished = unfinished + redis.call('ZCARD', KEYS[i]) end
if (KEYS[13] ~= '' and created > tonumber(ARGV[8]))
    or (#KEYS > 13 and unfinished >= tonumber(ARGV[10])) then
  return {-1, created, unfinished}
end
local seq = redis.call('INCR', KEYS[8])
local n = tonumber(ARGV[3])
local m = tonumber(ARGV[7])
local first = 11 + m
redis.call('HSET', KEYS[1], 'v', 1, 'seq', seq, unpack(ARGV, first, first - 1 + 2 * n))
if #ARGV >= first + 2 * n then
  redis.call('HSET', KEYS[2], unpack(ARGV, first + 2 * n, #ARGV))
end
for i = 4, 7 do redis.call('ZADD', KEYS[i], seq, ARGV[1]) end
if KEYS[9] ~= '' then redis.call('ZADD', KEYS[9], seq, ARGV[1]) end
if KEYS[3] ~= '' then redis.call('SET', KEYS[3], ARGV[1], 'EX', ARGV[2]) end
count_entry(KEYS[10], KEYS[11], ARGV[4], ARGV[5])
if KEYS[12] ~= '' then
  redis.call('XADD', KEYS[12], 'MAXLEN', '~', ARGV[6], '*', unpack(ARGV, 11, 10 + m))
end
return {1, ARGV[1]}
"""

# KEYS: task, revision, old-state-index, new-state-index, old-owner-state-index,
#       new-owner-state-index, expiry, insights key of every task (or "": not counted),
#       insights key of the task's project (or "")
# ARGV: expected v, id, expires-at (0: leave the expiry index be; "leave": the task leaves
#       a final state), number of task fields n, the state entered, insights TTL,
#       n task field/value pairs, revision field/value pairs
UPDATE = COUNT_ENTRY + """
local t = redis.call('HMGET', KEYS[1], 'v', 'seq')
local v = t[1]
if v ~= ARGV[1] then return 0 end
local n = tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'v', tonumber(v) + 1, unpack(ARGV, 7, 6 + 2 * n))
if #ARGV > 6 + 2 * n then redis.call('HSET', KEYS[2], unpack(ARGV, 7 + 2 * n, #ARGV)) end
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
# ARGV: revision (JSON), new state, allowed old states (comma-separated), final states
#       (comma-separated), now (JSON), expires-at (0: kept forever), the revision key's
#       suffix, the index key prefix, the insights key prefix of a project, insights TTL,
#       the event (JSON), id, "1" to return the record as moved (or "0"), then revision
#       field/value pairs
# Returns false if the task is gone, {0} if it is elsewhere, {2} if it is stored in the
# layout of before revisions had their own keys, {1, project} once moved, or
# {1, project, task fields, revision fields} when asked for the record.
MOVE = COUNT_ENTRY + """
local t = redis.call('HMGET', KEYS[1], 'v', 'state', 'revision', 'owner', 'seq', 'project')
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
redis.call('HSET', KEYS[1], 'v', tonumber(t[1]) + 1, 'state', state, 'updated_at', ARGV[5])
local r = redis.call('HMGET', rev, 'events', 'started_at')
local events = r[1]
if not events or events == '[]' or events == 'null' then events = '[' .. ARGV[11] .. ']'
else events = string.sub(events, 1, -2) .. ',' .. ARGV[11] .. ']' end
local fields = {'state', state, 'updated_at', ARGV[5], 'events', events}
for i = 14, #ARGV do fields[#fields + 1] = ARGV[i] end
if member(ARGV[4], new) then
  fields[#fields + 1] = 'ended_at'
  fields[#fields + 1] = ARGV[5]
elseif new == 'running' and (not r[2] or r[2] == 'null' or r[2] == '0') then
  fields[#fields + 1] = 'started_at'
  fields[#fields + 1] = ARGV[5]
end
redis.call('HSET', rev, unpack(fields))
if old ~= new then
  local owner = cjson.decode(t[4])
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
  return {1, project, redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', rev)}
end
return {1, project}
"""

# KEYS: task; ARGV: the revision key's suffix.  One round trip for a whole record.
READ = """
local t = redis.call('HGETALL', KEYS[1])
if #t == 0 then return false end
for i = 1, #t, 2 do
  if t[i] == 'revision' then return {t, redis.call('HGETALL', KEYS[1] .. ARGV[1] .. t[i + 1])} end
end
return {t, {}}
"""

# KEYS: expiry, the n index keys, the task, then the task's other keys
# ARGV: expected v, id, n.  Deletes a finished task whole, unless it changed meanwhile.
DELETE = """
local n = tonumber(ARGV[3])
if redis.call('HGET', KEYS[n + 2], 'v') ~= ARGV[1] then return 0 end
for i = 1, n + 1 do redis.call('ZREM', KEYS[i], ARGV[2]) end
redis.call('DEL', unpack(KEYS, n + 2, #KEYS))
return 1
"""
