-- Admit delivered messages of limited tasks, or defer them: limits are admission, not
-- failure. A deferred message is acknowledged off the stream, uses no attempt, and comes
-- back when the limit admits it, in order. Messages are decided one after the other, in
-- the order given (a batch of one runner's fetched messages: one call for all of them).
-- * A message that holds a concurrency slot already (a redelivery, a reclaim) runs.
-- * Rate limit (GCRA): the theoretical arrival time tat = max(stored, now); the message
--   conforms at tat - tolerance. The reservation is taken at once (stored tat + emission).
--   Conforming now: checked next for concurrency. Later: deferred to the group's delayed
--   set, due exactly then, marked as reserved, so it is not checked for its rate again.
-- * Concurrency: the oldest waiters are granted first while slots are free; then the
--   message takes a slot (its entry id holds it) if fewer than the limit are held and
--   nobody waits, else it is appended to the waiting list (release_slot grants it later),
--   and the group's index of waiters finds it by its task id (status, cancel).
-- KEYS[1]  the task stream (of the messages' lane: one lane per call)
-- KEYS[2]  the group's delayed set of retries (the delayed set, for a group of its own)
-- KEYS[3]  its messages
-- KEYS[4]  where moved tasks are (hash: task id -> stream id)
-- KEYS[5]  the quarantine stream
-- KEYS[6]  the queue's registry of groups (a set): with more than one group reading the
--          stream, a deferred entry is not deleted, nor its where-map entry
-- KEYS[7]  the keys of the concurrency limits in use (a set; the janitor looks them over)
-- KEYS[8]  the stream of the default lane (waiters granted enter their own lane)
-- then     per message, three keys: its rate limit's state, its concurrency holders
--          (sorted set: entry id -> granted at, ms) and waiting list (any key of the
--          group for what it has not)
-- ARGV[1]  the consumer group
-- ARGV[2]  '1' to XDEL a deferred entry (unless the stream is shared)
-- ARGV[3]  now (ms since the epoch)
-- ARGV[4]  the wake-up channel of the delayed set
-- ARGV[5]  what trunner's ids of the lane's entries add to their stream id ('' in the
--          default lane, else '@<lane>'): the holders of slots are trunner's ids
-- then     per message, seven arguments: its entry id; its task id; the message to store
--          when deferred (reencode_deferred: deferred by its rate, its mark
--          '"rate_reserved":true' becomes '"rate_reserved":<due ms>'); the rate's emission
--          interval in ms ('0': no rate check); its burst tolerance in ms; the concurrency
--          limit ('0': none); the concurrency limit's key (<len>:<task>[:<key>], or '')
-- Returns  per message {'run', 0}; {'rate', due ms}; {'wait', position in the waiting
--          list}; or {'lost', 0} when the entry is no longer pending (nothing written)
local refused = wrong_type({[KEYS[2]] = 'zset', [KEYS[3]] = 'hash', [KEYS[4]] = 'hash'})
if refused then
  return refused
end
local quarantine = KEYS[5]
-- A rate state is the theoretical arrival time, ms since the epoch, as '%.3f' writes it
-- (at most 15 digits before the point), with a time-to-live that ends 1 s after it.
-- Anything else is set aside before the message is acknowledged (the limit starts
-- afresh), so that the reservation written after the acknowledgement cannot fail (with
-- 'inf' or '1e300' a message was acknowledged and deleted, then not deferred: lost): what
-- checked_number refuses (numbers.lua: 'inf', 'nan', '1e300' ...), a state that never
-- expires, or one further ahead than its time-to-live (an hour of clock skew between the
-- runners allowed), which would defer the limit's tasks for years.
local RATE_STATE = {min = 0, digits = 15}
local SKEW_MS = 3600000
local now = tonumber(ARGV[3])
local known, groups = pcall(redis.call, 'SCARD', KEYS[6]) -- another type: shared
local shared = not known or groups > 1
local function admit_one(rate_key, holders, waiting, id, task_id, deferred, emission, tolerance,
    limit, limit_key)
  if limit > 0 then
    limit_key_usable(holders, 'zset', quarantine)
    limit_key_usable(waiting, 'list', quarantine)
    redis.pcall('SADD', KEYS[7], limit_key) -- another type: set aside by the runner at start
    if redis.call('ZSCORE', holders, id .. ARGV[5]) then
      return {'run', 0}
    end
  end
  local tat, due = nil, nil
  if emission > 0 then
    limit_key_usable(rate_key, 'string', quarantine)
    local stored = redis.call('GET', rate_key)
    local at, why = nil, nil
    if stored then
      at, why = checked_number(stored, RATE_STATE)
      if at then
        local ttl = redis.call('PTTL', rate_key)
        if ttl < 0 then
          at, why = nil, 'a time that never expires'
        elseif at > now + ttl + SKEW_MS then
          at, why = nil, 'a time beyond its time-to-live'
        end
      end
      if not at then -- what trunner never writes: set aside, the limit starts afresh
        limit_set_aside(rate_key, why, 'a time in ms', quarantine)
      end
    end
    tat = math.max(at or now, now)
    local allow = tat - tolerance
    if allow > now then
      due = math.ceil(allow)
    end
    tat = tat + emission
  end
  local function reserve()
    if tat then
      redis.call('SET', rate_key, string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 1000)
    end
  end
  local function acknowledge()
    if redis.call('XACK', KEYS[1], ARGV[1], id) == 0 then
      return false
    end
    if not shared then -- else another group may not have read it
      if ARGV[2] == '1' then
        redis.call('XDEL', KEYS[1], id)
      end
      if task_id ~= id .. ARGV[5] then
        redis.call('HDEL', KEYS[4], task_id)
      end
    end
    return true
  end
  if due then
    if not acknowledge() then
      return {'lost', 0}
    end
    reserve()
    local message = deferred
    local mark = ',"rate_reserved":true}'
    if string.sub(message, -#mark) == mark then -- the reserved time, for the record
      message = string.sub(message, 1, -6) .. string.format('%d', due) .. '}'
    end
    redis.call('ZADD', KEYS[2], due, task_id)
    redis.call('HSET', KEYS[3], task_id, message)
    local first = redis.call('ZRANGE', KEYS[2], 0, 0)
    if first[1] == task_id then
      redis.call('PUBLISH', ARGV[4], due)
    end
    return {'rate', due}
  end
  if limit > 0 then
    grant_waiters(holders, waiting, limit, KEYS[8], KEYS[4], quarantine)
    if redis.call('ZCARD', holders) >= limit or redis.call('LLEN', waiting) > 0 then
      if not acknowledge() then
        return {'lost', 0}
      end
      reserve()
      local position = redis.call('RPUSH', waiting, deferred)
      index_waiter(holders, waiting, task_id, deferred)
      return {'wait', position}
    end
    if not redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)[1] then
      return {'lost', 0} -- finished or claimed by another meanwhile: no slot for it
    end
    redis.call('ZADD', holders, now, id .. ARGV[5])
  end
  reserve()
  return {'run', 0}
end
local verdicts = {}
for m = 0, (#ARGV - 5) / 7 - 1 do
  local a, k = 6 + 7 * m, 9 + 3 * m
  verdicts[m + 1] = admit_one(KEYS[k], KEYS[k + 1], KEYS[k + 2], ARGV[a], ARGV[a + 1],
    ARGV[a + 2], tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]),
    ARGV[a + 6])
end
return verdicts
