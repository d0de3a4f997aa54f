-- Admit a delivered message of a limited task, or defer it: limits are admission, not
-- failure. A deferred message is acknowledged off the stream, uses no attempt, and comes
-- back when the limit admits it, in order.
-- * A message that holds a concurrency slot already (a redelivery, a reclaim) runs.
-- * Rate limit (GCRA): the theoretical arrival time tat = max(stored, now); the message
--   conforms at tat - tolerance. The reservation is taken at once (stored tat + emission).
--   Conforming now: checked next for concurrency. Later: deferred to the delayed set, due
--   exactly then, marked as reserved (ARGV[6]), so it is not checked for its rate again.
-- * Concurrency: the oldest waiters are granted first while slots are free; then the
--   message takes a slot (its entry id holds it) if fewer than the limit are held and
--   nobody waits, else it is appended to the waiting list (release_slot grants it later).
-- KEYS[1]  the task stream
-- KEYS[2]  the group's delayed set of retries (the delayed set, for a group of its own)
-- KEYS[3]  its messages
-- KEYS[4]  where moved tasks are (hash: task id -> stream id)
-- KEYS[5]  the quarantine stream
-- KEYS[6]  the rate limit's state (any key of the group without a rate check)
-- KEYS[7]  the concurrency holders (sorted set: entry id -> granted at, ms)
-- KEYS[8]  the concurrency waiting list (encoded messages)
-- KEYS[9]  the queue's registry of groups (a set): with more than one group reading the
--          stream, a deferred entry is not deleted, nor its where-map entry
-- KEYS[10] the keys of the concurrency limits in use (a set; the janitor looks them over)
-- ARGV[1]  the consumer group
-- ARGV[2]  '1' to XDEL a deferred entry (unless the stream is shared)
-- ARGV[3]  the entry id
-- ARGV[4]  the task id
-- ARGV[5]  now (ms since the epoch)
-- ARGV[6]  the message to store when deferred (reencode_deferred); deferred by its rate,
--          its mark '"rate_reserved":true' becomes '"rate_reserved":<due ms>'.
-- ARGV[7]  the wake-up channel of the delayed set
-- ARGV[8]  the rate's emission interval in ms ('0': no rate check)
-- ARGV[9]  the rate's burst tolerance in ms
-- ARGV[10] the concurrency limit ('0': none)
-- ARGV[11] the concurrency limit's key (<len>:<task>[:<key>]; '' without a limit)
-- Returns  {'run'}; {'rate', due ms}; {'wait', position in the waiting list}; or {'lost'}
--          when the entry is no longer pending (nothing written)
local refused = wrong_type({[KEYS[2]] = 'zset', [KEYS[3]] = 'hash', [KEYS[4]] = 'hash'})
if refused then
  return refused
end
local id, task_id, quarantine = ARGV[3], ARGV[4], KEYS[5]
local now = tonumber(ARGV[5])
local emission = tonumber(ARGV[8])
local limit = tonumber(ARGV[10])
if limit > 0 then
  limit_key_usable(KEYS[7], 'zset', quarantine)
  limit_key_usable(KEYS[8], 'list', quarantine)
  redis.pcall('SADD', KEYS[10], ARGV[11]) -- another type: set aside by the runner at start
  if redis.call('ZSCORE', KEYS[7], id) then
    return {'run'}
  end
end
local tat, due = nil, nil
if emission > 0 then
  limit_key_usable(KEYS[6], 'string', quarantine)
  local stored = redis.call('GET', KEYS[6])
  local at = stored and tonumber(stored)
  if stored and not at then
    limit_set_aside(KEYS[6], 'a string that is not a time', 'a time in ms', quarantine)
  end
  tat = math.max(at or now, now)
  local allow = tat - tonumber(ARGV[9])
  if allow > now then
    due = math.ceil(allow)
  end
  tat = tat + emission
end
local function reserve()
  if tat then
    redis.call('SET', KEYS[6], string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 1000)
  end
end
local function acknowledge()
  if redis.call('XACK', KEYS[1], ARGV[1], id) == 0 then
    return false
  end
  local known, groups = pcall(redis.call, 'SCARD', KEYS[9]) -- another type: shared
  if known and groups < 2 then -- else another group may not have read it
    if ARGV[2] == '1' then
      redis.call('XDEL', KEYS[1], id)
    end
    if task_id ~= id then
      redis.call('HDEL', KEYS[4], task_id)
    end
  end
  return true
end
if due then
  if not acknowledge() then
    return {'lost'}
  end
  reserve()
  local message = ARGV[6]
  local mark = ',"rate_reserved":true}'
  if string.sub(message, -#mark) == mark then -- the reserved time, for the record
    message = string.sub(message, 1, -6) .. string.format('%d', due) .. '}'
  end
  redis.call('ZADD', KEYS[2], due, task_id)
  redis.call('HSET', KEYS[3], task_id, message)
  local first = redis.call('ZRANGE', KEYS[2], 0, 0)
  if first[1] == task_id then
    redis.call('PUBLISH', ARGV[7], due)
  end
  return {'rate', due}
end
if limit > 0 then
  grant_waiters(KEYS[7], KEYS[8], limit, KEYS[1], KEYS[4], quarantine)
  if redis.call('ZCARD', KEYS[7]) >= limit or redis.call('LLEN', KEYS[8]) > 0 then
    if not acknowledge() then
      return {'lost'}
    end
    reserve()
    return {'wait', redis.call('RPUSH', KEYS[8], ARGV[6])}
  end
  redis.call('ZADD', KEYS[7], now, id)
end
reserve()
return {'run'}
