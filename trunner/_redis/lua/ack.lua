-- Acknowledge finished messages and, with delete-on-ack, remove them from the stream;
-- release the unique locks of those that hold one (only the lock each one took); write
-- the outcome of the tasks that keep their result; forget where moved tasks were, and the
-- cancel marks of cancelled ones; tell the waiters which tasks finished (one PUBLISH).
-- Everything in one script: an acknowledged task always has its outcome, and an outcome
-- always belongs to an acknowledged task.
-- KEYS[1]  the task stream (of the entries' lane: one lane per call)
-- KEYS[2]  where moved tasks are (hash: task id -> stream id)
-- KEYS[3]  the cancel marks (hash: task id -> until, ms)
-- KEYS[4..3+L] the unique locks of some of the messages
-- KEYS[4+L..]  the records of the tasks that keep their result, in order
-- then     (with S > 0) per concurrency slot held: its holders and its waiting list; then
--          the quarantine stream and the stream of the default lane (limits.lua)
-- KEYS[#KEYS]   the queue's registry of groups (a set): with more than one group reading
--               the stream, neither the entries nor the cancel marks are deleted
--               (another group may not have read them yet)
-- ARGV[1]  the consumer group
-- ARGV[2]  '1' to XDEL the entries (unless the stream is shared), '0' to keep them
-- ARGV[3]  the channel of finished tasks ('' to say nothing)
-- ARGV[4]  what trunner's ids of the lane's entries add to their stream id ('' in the
--          default lane, else '@<lane>'): the channel says trunner's ids
-- ARGV[5]  n, then the n stream ids (the caller sends at most 1000 per call)
-- then     L, then one lock token per lock key, in KEYS order
-- then     M, then M pairs: the (1-based) index of an entry whose id is not its task's id,
--          and the task's id (the where-map forgets it; the channel says it)
-- then     C, then C task ids whose cancel marks go
-- then     R, then per record either a JSON object of its fields (stored as a string,
--          what task_status.lua reads as the record) then its time-to-live (ms); or one
--          argument, a JSON array of strings: the field/value pairs, then the
--          time-to-live (ms) (stored as a hash); or its time-to-live (ms), F, then F
--          field/value pairs (a hash; F = 0: the record is deleted: a task that keeps no
--          result but reported progress)
-- then     (optional) S, then S pairs: the entry id holding a concurrency slot (as trunner
--          names it: '<stream id>@<lane>' in another lane than the default), the limit;
--          the slot is released and the oldest waiters granted (limits.lua)
-- Returns  how many entries were still pending and are now acknowledged
local at = 5
local function take()
  local value = ARGV[at]
  at = at + 1
  return value
end
local n = tonumber(take())
local ids = {unpack(ARGV, at, at + n - 1)}
at = at + n
local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
local known, groups = pcall(redis.call, 'SCARD', KEYS[#KEYS]) -- another type: shared
local shared = not known or groups > 1
if ARGV[2] == '1' and not shared then
  redis.call('XDEL', KEYS[1], unpack(ids))
end
local locks = tonumber(take())
for i = 1, locks do
  local key = KEYS[3 + i]
  local token = take()
  local ok, held = pcall(redis.call, 'GET', key) -- another type: nobody's lock
  if ok and held == token then
    redis.call('DEL', key)
  end
end
local said = ids
if ARGV[4] ~= '' then
  said = {}
  for i = 1, #ids do
    said[i] = ids[i] .. ARGV[4]
  end
end
local moved = tonumber(take())
if moved > 0 then
  if said == ids then
    said = {unpack(ids)}
  end
  for _ = 1, moved do
    local index = tonumber(take())
    local task_id = take()
    said[index] = task_id
    if not shared then -- else the janitor forgets it once the entry is trimmed
      redis.call('HDEL', KEYS[2], task_id)
    end
  end
end
local cancelled = tonumber(take())
for _ = 1, cancelled do
  local task_id = take()
  if not shared then -- else another group may not have read it: the mark expires
    redis.call('HDEL', KEYS[3], task_id)
  end
end
local records = tonumber(take())
for r = 1, records do
  local key = KEYS[3 + locks + r]
  local head = take()
  if string.byte(head) == 123 then -- '{': the record as one JSON object, then its TTL
    redis.call('SET', key, head, 'PX', take())
  elseif string.byte(head) == 91 then -- '[': the pairs and the time-to-live, as JSON
    redis.call('DEL', key)
    local flat = cjson.decode(head)
    local ttl = table.remove(flat)
    redis.call('HSET', key, unpack(flat))
    redis.call('PEXPIRE', key, ttl)
  else
    redis.call('DEL', key)
    local fields = tonumber(take())
    if fields > 0 then
      redis.call('HSET', key, unpack(ARGV, at, at + 2 * fields - 1))
      at = at + 2 * fields
      redis.call('PEXPIRE', key, head)
    end
  end
end
local slots = tonumber(ARGV[at] or '0')
if slots > 0 then
  at = at + 1
  local first = 4 + locks + records
  local quarantine = KEYS[first + 2 * slots]
  for s = 1, slots do
    local holder = take()
    local limit = tonumber(take())
    release_slot(KEYS[first + 2 * s - 2], KEYS[first + 2 * s - 1], holder, limit,
      KEYS[first + 2 * slots + 1], KEYS[2], quarantine)
  end
end
if ARGV[3] ~= '' then
  redis.call('PUBLISH', ARGV[3], table.concat(said, ' '))
end
return acked
