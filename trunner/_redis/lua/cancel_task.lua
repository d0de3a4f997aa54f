-- Cancel a task wherever it is, atomically: a delayed task (or a retry waiting for its
-- backoff) is removed; a queued one (in the stream, never delivered) is deleted before any
-- consumer sees it; a running one (delivered to a consumer) gets a cancel mark and an
-- announcement: the runner holding it cancels it, and a runner that fetches it later
-- drops it before it starts. A cancelled task's outcome is 'cancelled': its record says
-- so when it keeps its result, and its waiters are told. (After waiting.lua, lanes.lua,
-- delivered.lua and cancel_core.lua: where a task waits, and how it leaves, is
-- cancel_take's, shared with a workflow's sweep, cancel_steps.lua.)
-- KEYS[1]  the task stream (of the default lane: an entry id names its lane, lanes.lua)
-- KEYS[2]  the delayed set
-- KEYS[3]  the delayed messages
-- KEYS[4]  the unique delayed tasks
-- KEYS[5]  where moved tasks are (hash: task id -> stream id)
-- KEYS[6]  the cancel marks (hash: task id -> until, ms)
-- KEYS[7]  the task's record
-- KEYS[8]  the group's delayed set of retries (the delayed set, for a group of its own)
-- KEYS[9]  its messages
-- KEYS[10] the queue's registry of groups (a set)
-- KEYS[11] the group's index of tasks waiting for a concurrency slot (waiting.lua)
-- KEYS[12] (optional) the lock of the task's unique key
-- ARGV[1]  the consumer group
-- ARGV[2]  the task id
-- ARGV[3]  until when a cancel mark holds (ms since the epoch)
-- ARGV[4]  the cancel channel
-- ARGV[5]  the channel of finished tasks
-- ARGV[6]  the lock's token ('' without a lock)
-- ARGV[7]  the record's time-to-live in ms ('0': no record is written)
-- ARGV[8]  what the keys of the queue's groups start with ('<prefix>:{<queue>}:')
-- ARGV[9]  the queue's name (its group of that name keeps its keys under ARGV[8] itself)
-- ARGV[10] what the keys of the group's waiting lists start with
-- ARGV[11..] field/value pairs of the record
-- Returns  'delayed', 'waiting' (for a concurrency slot: removed from its waiting list),
--          'queued' or 'running' (where it was cancelled), or 'absent'
-- On a stream that several groups read (the registry holds more than one), a queued entry
-- is deleted only while no group has it pending; else it is 'running'. Whatever it finds,
-- the task gets the mark there, which every group that fetches it later obeys (and which
-- stays until it expires): another group's retry of it may be waiting, or on its way.
-- A task it removes for groups that would never see it otherwise (a delayed dispatch, on
-- the queue's delayed set; a queued entry that some group has not read yet; not a message
-- of one group for itself, such as a retry, which the others skip) gets its
-- outcome in the record of each of those groups too, and their waiters are told: to them
-- it was cancelled, not never dispatched.
-- A workflow's step (its message has a 'wf' member) is never removed: it gets the mark
-- wherever it is, and is dropped when fetched, so that its end is recorded with its
-- acknowledgement as every step's is (workflows.lua); it is then 'running' (cancelling).
-- What something else wrote never fails it: an id, or a where-map entry, that leads to no
-- entry of this task is 'absent'.
local id = ARGV[2]
local function release_lock()
  local locked, held = false, false
  if KEYS[12] then
    locked, held = pcall(redis.call, 'GET', KEYS[12]) -- another type: nobody's lock
  end
  if locked and held == ARGV[6] then
    redis.call('DEL', KEYS[12])
  end
end
local function write_outcome(record, done)
  if ARGV[7] ~= '0' then
    redis.call('DEL', record)
    redis.call('HSET', record, unpack(ARGV, 11))
    redis.call('PEXPIRE', record, ARGV[7])
  end
  redis.call('PUBLISH', done, id)
end
local function record_outcome()
  write_outcome(KEYS[7], ARGV[5])
end
-- The same outcome for the other groups named (keys.py: Keys._key of each group).
local function record_for(groups)
  for _, group in ipairs(groups) do
    if group ~= ARGV[1] then
      local base = ARGV[8]
      if group ~= ARGV[9] then
        base = base .. 'group:' .. group .. ':'
      end
      write_outcome(base .. 'task:' .. id, base .. 'done')
    end
  end
end
local known, groups = pcall(redis.call, 'SCARD', KEYS[10]) -- another type: shared
local shared = not known or groups > 1
local function registered()
  local ok, names = pcall(redis.call, 'SMEMBERS', KEYS[10])
  return ok and names or {}
end
local function mark()
  redis.call('HSET', KEYS[6], id, ARGV[3])
  redis.call('PUBLISH', ARGV[4], id)
end
-- On a shared stream every way out also marks the task: another group may hold a retry of
-- it (in its own delayed set, which this script does not see), or fetch it later.
-- A delayed message for one group alone (a retry, a replay of the group of the queue's own
-- name, whose delayed set is the queue's) is that group's: no other group would see it.
local function everyones(message)
  local ok, body = pcall(cjson.decode, message or '')
  return ok and type(body) == 'table' and body.group == nil
end
local function is_step(message)
  local ok, body = pcall(cjson.decode, message or '')
  return ok and type(body) == 'table' and body.wf ~= nil
end
local c = {stream = KEYS[1], delayed = KEYS[2], delayed_messages = KEYS[3],
  delayed_unique = KEYS[4], where = KEYS[5], retries = KEYS[8], retry_messages = KEYS[9],
  waiters = KEYS[11], waiting_prefix = ARGV[10], group = ARGV[1], shared = shared}
local where, detail = cancel_take(c, id, function(message)
  return not is_step(message)
end)
if where == 'kept' then
  mark() -- a step (a retry, a deferral, queued): dropped when it is fetched, its end
  return 'running' -- recorded with its acknowledgement
end
if where == 'running' or (where == 'absent' and shared) then
  mark()
  return where
end
if where == 'absent' then
  return where
end
release_lock()
record_outcome()
if shared then
  if where == 'delayed' and detail.queue and everyones(detail.message) then
    record_for(registered()) -- a delayed dispatch: no group will see it now
  elseif where == 'queued' and detail.everyone then
    record_for(detail.unread)
  end
  mark()
end
return where
