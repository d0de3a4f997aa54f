-- Acknowledge finished messages and, with delete-on-ack, remove them from the stream;
-- release the unique locks of those that hold one (only the lock each one took); write
-- the outcome of the tasks that keep their result; forget where moved tasks were, and the
-- cancel marks of cancelled ones; tell the waiters which tasks finished (one PUBLISH).
-- Everything in one script: an acknowledged task always has its outcome, and an outcome
-- always belongs to an acknowledged task. Fenced: an entry whose attempt's delivery is no
-- longer pending for this consumer (owns_delivery, deliveries.lua) is neither
-- acknowledged nor written for: nothing of this call touches it.
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
-- ARGV[5]  the consumer the entries' deliveries are pending for
-- ARGV[6]  n, then n pairs: a stream id, and the delivery count of the attempt that ended
--          (the caller sends at most 1000 entries per call)
-- then     L, then L pairs, one per lock key in KEYS order: the (1-based) index of the
--          entry that holds it, its token
-- then     M, then M pairs: the index of an entry whose id is not its task's id, and the
--          task's id (the where-map forgets it; the channel says it)
-- then     C, then C pairs: the index of an entry, the task id whose cancel mark goes
-- then     R, then per record (KEYS order): the index of its entry, then either a JSON
--          object of its fields (stored as a string, what task_status.lua reads as the
--          record) then its time-to-live (ms); or one argument, a JSON array of strings:
--          the field/value pairs, then the time-to-live (ms) (stored as a hash); or its
--          time-to-live (ms), F, then F field/value pairs (a hash; F = 0: the record is
--          deleted: a task that keeps no result but reported progress)
-- then     (optional) S, then S triples: the index of the entry holding a concurrency
--          slot, its id as trunner names it ('<stream id>@<lane>' in another lane than
--          the default), the limit; the slot is released and the oldest waiters granted
--          (limits.lua)
-- then     (optional, after S, which is then always given) F, the workflows whose steps
--          ended here (workflows.lua); the cancel channel, the done channel, how long a
--          cancel mark holds (ms), the largest message a runner reads; then per workflow:
--          its id, E, then E ends: the index of the step's entry, its node, how it ended
--          ('ok' | 'cancelled' | 'expired'), its successors, its result ('' when not
--          kept), its failure JSON ('' for 'ok'). Its keys, after the slots': the stream
--          of the default lane, the group's index of workflows, the quarantine stream, the
--          cancel marks, then five per workflow (wf, plan, marks, res, err). A step's end
--          is recorded only when its entry was acknowledged here.
-- Returns  {how many entries were acknowledged, {the stream ids whose delivery was no
--          longer the ending attempt's: nothing was written for them}, {per workflow of
--          the F: its state after this call (false: gone, set aside, or not ended here)}}
local at = 5
local function take()
  local value = ARGV[at]
  at = at + 1
  return value
end
local consumer = take()
local n = tonumber(take())
local ids, mine, lost = {}, {}, {}
for i = 1, n do
  local id, deliveries = take(), take()
  if owns_delivery(KEYS[1], ARGV[1], id, consumer, deliveries) then
    ids[#ids + 1] = id
    mine[i] = id
  else
    lost[#lost + 1] = id
  end
end
local acked = 0
local known, groups = pcall(redis.call, 'SCARD', KEYS[#KEYS]) -- another type: shared
local shared = not known or groups > 1
if #ids > 0 then
  acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
  if ARGV[2] == '1' and not shared then
    redis.call('XDEL', KEYS[1], unpack(ids))
  end
end
local locks = tonumber(take())
for i = 1, locks do
  local key = KEYS[3 + i]
  local index, token = tonumber(take()), take()
  if mine[index] then
    local ok, held = pcall(redis.call, 'GET', key) -- another type: nobody's lock
    if ok and held == token then
      redis.call('DEL', key)
    end
  end
end
local said = {} -- by entry index: what the channel says of it
for i = 1, n do
  if mine[i] then
    said[i] = mine[i] .. ARGV[4]
  end
end
local moved = tonumber(take())
for _ = 1, moved do
  local index, task_id = tonumber(take()), take()
  if mine[index] then
    said[index] = task_id
    if not shared then -- else the janitor forgets it once the entry is trimmed
      redis.call('HDEL', KEYS[2], task_id)
    end
  end
end
local cancelled = tonumber(take())
for _ = 1, cancelled do
  local index, task_id = tonumber(take()), take()
  if mine[index] and not shared then -- else another group may not have read it: the
    redis.call('HDEL', KEYS[3], task_id) -- mark expires
  end
end
local records = tonumber(take())
for r = 1, records do
  local key = KEYS[3 + locks + r]
  local index, head = tonumber(take()), take()
  if string.byte(head) == 123 then -- '{': the record as one JSON object, then its TTL
    local ttl = take()
    if mine[index] then
      redis.call('SET', key, head, 'PX', ttl)
    end
  elseif string.byte(head) == 91 then -- '[': the pairs and the time-to-live, as JSON
    if mine[index] then
      redis.call('DEL', key)
      local flat = cjson.decode(head)
      local ttl = table.remove(flat)
      redis.call('HSET', key, unpack(flat))
      redis.call('PEXPIRE', key, ttl)
    end
  else
    local fields = tonumber(take())
    if mine[index] then
      redis.call('DEL', key)
      if fields > 0 then
        redis.call('HSET', key, unpack(ARGV, at, at + 2 * fields - 1))
        redis.call('PEXPIRE', key, head)
      end
    end
    at = at + 2 * fields
  end
end
local slots = tonumber(ARGV[at] or '0')
if ARGV[at] then
  at = at + 1
end
if slots > 0 then
  local first = 4 + locks + records
  local quarantine = KEYS[first + 2 * slots]
  for s = 1, slots do
    local index, holder, limit = tonumber(take()), take(), tonumber(take())
    if mine[index] then
      release_slot(KEYS[first + 2 * s - 2], KEYS[first + 2 * s - 1], holder, limit,
        KEYS[first + 2 * slots + 1], KEYS[2], quarantine)
    end
  end
end
local states = {}
local flows = tonumber(ARGV[at] or '0')
if flows > 0 then
  at = at + 1
  local first = 4 + locks + records + (slots > 0 and 2 * slots + 2 or 0)
  local ctx = wf_context(KEYS[first], KEYS[2], KEYS[first + 3], KEYS[first + 1],
    KEYS[first + 2], shared, take(), take(), take(), take())
  for f = 1, flows do
    local k = wf_keys(KEYS, first + 4 + 5 * (f - 1))
    local wid, ends = take(), tonumber(take())
    local state = false
    for _ = 1, ends do
      local index, node, kind, nxt, result, err = tonumber(take()), tonumber(take()), take(),
        take(), take(), take()
      if mine[index] then -- the fencing decision, reused
        state = wf_step_end(k, wid, node, kind, nxt, result, err, ctx) or false
      end
    end
    states[f] = state
  end
end
if ARGV[3] ~= '' and #ids > 0 then
  local told = {}
  for i = 1, n do
    if said[i] then
      told[#told + 1] = said[i]
    end
  end
  redis.call('PUBLISH', ARGV[3], table.concat(told, ' '))
end
return {acked, lost, states}
