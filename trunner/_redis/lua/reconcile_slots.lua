-- Free the concurrency slots whose holder is gone (the leader's janitor): a holder is an
-- entry id of the group (as trunner names it: '<stream id>@<lane>' in another lane); it is gone when it is pending for no consumer of the
-- group and either no longer in the stream (a granted waiter cancelled before anyone
-- fetched it, an entry deleted or trimmed) or already delivered to the group (finished
-- without its slot being released). A holder pending anywhere (running, crashed and not
-- yet reclaimed, handed back at shutdown), or in the stream and not yet delivered (a
-- granted waiter on its way), keeps its slot: a slot is never freed early. The freed
-- slots go to the oldest waiters (limits.lua), when the limit is known.
-- A holder nothing trunner wrote can be (not an entry id, or an entry of a lane that has
-- no stream: no entry of it can be pending, nor on its way) is freed and recorded in the
-- quarantine stream. A lane stream without the group keeps its holders: nothing can be told.
-- KEYS[1]  the task stream (of the default lane: a holder's id names its lane, lanes.lua)
-- KEYS[2]  the keys of the concurrency limits in use (a set)
-- KEYS[3]  the limit's holders (sorted set: entry id -> granted at, ms)
-- KEYS[4]  the limit's waiting list
-- KEYS[5]  where moved tasks are (hash: task id -> stream id)
-- KEYS[6]  the quarantine stream
-- ARGV[1]  the consumer group
-- ARGV[2]  the limit's key (its member of KEYS[2])
-- ARGV[3]  the limit ('0': not known here, nothing is granted)
-- Returns  {freed, held now, waiting now}; the limit's key leaves KEYS[2] once nothing
--          holds or waits
limit_key_usable(KEYS[3], 'zset', KEYS[6])
limit_key_usable(KEYS[4], 'list', KEYS[6])
-- Per stream of a lane: 'none' (no stream there: its holders are gone), 'group' (the
-- group reads it: its holders are looked at) or 'unknown' (a stream without the group:
-- nothing can be told, its holders keep their slots).
local known = {}
local function lane_state(stream)
  if known[stream] == nil then
    local kind = redis.call('TYPE', stream)
    if type(kind) == 'table' then
      kind = kind['ok']
    end
    if kind ~= 'stream' then -- a key of another type holds no entry either
      known[stream] = 'none'
    elseif pcall(redis.call, 'XPENDING', stream, ARGV[1]) then
      known[stream] = 'group'
    else
      known[stream] = 'unknown'
    end
  end
  return known[stream]
end
local freed = 0
local function set_aside(id, reason)
  redis.call('ZREM', KEYS[3], id)
  freed = freed + 1
  redis.pcall('XADD', KEYS[6], 'MAXLEN', '~', 10000, '*', 'source', 'concurrency:holders',
    'item', KEYS[3], 'reason', reason, 'action', 'slot freed', 'value', string.sub(id, 1, 4096),
    'instance', '', 'at', string.format('%d', limit_now_ms()))
end
for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, 999)) do
  local stream, entry = checked_entry(KEYS[1], id)
  local state = stream and lane_state(stream)
  if not stream then
    set_aside(id, 'not an entry id')
  elseif state == 'none' then
    set_aside(id, 'an entry of a lane that has no stream')
  elseif state == 'group' then
    local pending = redis.call('XPENDING', stream, ARGV[1], entry, entry, 1)
    if not pending[1] then
      local present = #redis.call('XRANGE', stream, entry, entry) > 0
      if not present or delivered_to(stream, ARGV[1], entry) then
        redis.call('ZREM', KEYS[3], id)
        freed = freed + 1
      end
    end
  end
end
local limit = tonumber(ARGV[3]) or 0
if freed > 0 and limit > 0 then
  grant_waiters(KEYS[3], KEYS[4], limit, KEYS[1], KEYS[5], KEYS[6])
end
local held, waiting = redis.call('ZCARD', KEYS[3]), redis.call('LLEN', KEYS[4])
if held == 0 and waiting == 0 then
  redis.pcall('SREM', KEYS[2], ARGV[2])
end
return {freed, held, waiting}
