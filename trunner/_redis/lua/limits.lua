-- Concurrency slots and limit keys: the first lines of the scripts that admit messages
-- of limited tasks (admit.lua) and of those that end them (ack.lua, retry.lua,
-- dead_letter.lua), so that a slot is released with the acknowledgement, atomically, and
-- given at once to the oldest waiter.
-- A limit key holding another type (written by something other than trunner) is renamed
-- aside (nothing is deleted) and the quarantine stream says so: the limit starts afresh.
-- A waiting-list item that is not a task message is moved to the quarantine (its value
-- kept) and the next one is granted.
local function limit_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function limit_set_aside(key, had, want, quarantine)
  local at = string.format('%d', limit_now_ms())
  local to, n = key .. ':bad:' .. at, 0
  while redis.call('EXISTS', to) == 1 do
    n = n + 1
    to = key .. ':bad:' .. at .. '.' .. n
  end
  redis.call('RENAME', key, to)
  -- best effort: a quarantine stream of the wrong type is set aside by the runners' loops
  redis.pcall('XADD', quarantine, 'MAXLEN', '~', 10000, '*', 'source', 'limits', 'item', key,
    'reason', had .. ', not ' .. want .. ' of a limit', 'action', 'renamed to ' .. to,
    'value', '', 'instance', '', 'at', at)
end
-- limit_key_usable(key, want, quarantine): a key of another type is set aside first
local function limit_key_usable(key, want, quarantine)
  local had = redis.call('TYPE', key)
  if type(had) == 'table' then
    had = had['ok']
  end
  if had ~= want and had ~= 'none' then
    limit_set_aside(key, 'a ' .. had, 'a ' .. want, quarantine)
  end
end
-- waiters_index(holders, waiting) -> the group's index of waiters (keys.py:
-- Keys.concurrency_waiters; hash: task id -> '<n>:<waiting list key><message>', n the
-- length of the key), so that status and cancel find a task waiting for a slot. Named from
-- a limit's keys, '<group's>concurrency:holders:<limit>' and '<group's>concurrency:waiting:
-- <limit>', which part at 'holders' / 'waiting': '<group's>concurrency:waiters'.
local function waiters_index(holders, waiting)
  local i = 1
  while i <= #waiting and string.byte(holders, i) == string.byte(waiting, i) do
    i = i + 1
  end
  return string.sub(waiting, 1, i - 13) .. 'concurrency:waiters'
end
-- index_waiter(holders, waiting, task id, message): the waiter appended to the list is
-- found by its task id (best effort: an index of another type is set aside at start).
local function index_waiter(holders, waiting, task_id, message)
  redis.pcall('HSET', waiters_index(holders, waiting), task_id,
    string.format('%d:', #waiting) .. waiting .. message)
end
-- unindex_waiter(holders, waiting, task id, message): that waiter left the list.
local function unindex_waiter(holders, waiting, task_id, message)
  local index = waiters_index(holders, waiting)
  local ok, held = pcall(redis.call, 'HGET', index, task_id)
  if ok and held == string.format('%d:', #waiting) .. waiting .. message then
    redis.call('HDEL', index, task_id)
  end
end
-- grant_waiters(holders, waiting, limit, stream, where, quarantine) -> how many granted:
-- while fewer than limit hold a slot, the oldest waiter's message re-enters the stream
-- (of the default lane: the lane the message names, lanes.lua) and its new entry id holds
-- the slot (the where-map finds it by its task id). At most 100 items are looked at per
-- call. Holders are trunner's entry ids ('<stream id>@<lane>' in another lane).
local function grant_waiters(holders, waiting, limit, stream, where, quarantine)
  local granted, looked = 0, 0
  local now = nil
  while looked < 100 and redis.call('ZCARD', holders) < limit do
    local message = redis.call('LPOP', waiting)
    if not message then
      break
    end
    looked = looked + 1
    local ok, body = pcall(cjson.decode, message)
    if ok and type(body) == 'table' and type(body.task) == 'string' and type(body.id) == 'string'
        and body.id ~= '' then
      now = now or limit_now_ms()
      unindex_waiter(holders, waiting, body.id, message)
      local lane_stream, suffix = message_lane(stream, message)
      local id = redis.call('XADD', lane_stream, '*', 'payload', message) .. suffix
      redis.call('ZADD', holders, now, id)
      redis.pcall('HSET', where, body.id, id)
      granted = granted + 1
    else
      redis.pcall('XADD', quarantine, 'MAXLEN', '~', 10000, '*', 'source', 'concurrency:waiting',
        'item', waiting, 'reason', 'not a task message with its id', 'action', 'removed',
        'value', string.sub(message, 1, 4096), 'instance', '', 'at', string.format('%d', limit_now_ms()))
    end
  end
  return granted
end
-- release_slot(holders, waiting, id, limit, stream, where, quarantine): the entry id (as
-- trunner names it) no longer holds a slot; the waiters are granted what is free (stream:
-- of the default lane).
local function release_slot(holders, waiting, id, limit, stream, where, quarantine)
  limit_key_usable(holders, 'zset', quarantine)
  limit_key_usable(waiting, 'list', quarantine)
  redis.call('ZREM', holders, id)
  return grant_waiters(holders, waiting, limit, stream, where, quarantine)
end
