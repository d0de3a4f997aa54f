-- Record that tasks which keep their result started: their record says 'running', unless
-- it already holds a later state (a start is never written over an end, nor over the
-- 'retrying' its own attempt wrote when it failed before this write went out, nor over a
-- later attempt's start). A key of another type (written by something else) is replaced.
-- Fenced: a record is written only while its attempt's delivery is still the pending one
-- (owns_delivery, deliveries.lua): a late attempt never writes over a live one's start.
-- KEYS[1..n]    the records
-- KEYS[n+1..2n] per record, the task stream of its attempt's entry (of the entry's lane)
-- ARGV[1]  the consumer group
-- ARGV[2..] per record, in KEYS order: its entry id, the consumer and delivery count of its
--          attempt, its time-to-live (ms), F, then F field/value pairs (one 'attempt')
-- Returns  how many records were written
-- is_outcome(key): whether the key holds an outcome written as one JSON object (ack.lua
-- writes a finished task's record so: a string starting with its state)
local function is_outcome(key)
  local ok, text = pcall(redis.call, 'GET', key)
  return ok and type(text) == 'string' and string.sub(text, 1, 9) == '{"state":'
end
local at, written = 2, 0
local n = #KEYS / 2
for i = 1, n do
  local id, consumer, count = ARGV[at], ARGV[at + 1], ARGV[at + 2]
  local ttl, fields = ARGV[at + 3], tonumber(ARGV[at + 4])
  at = at + 5
  if owns_delivery(KEYS[n + i], ARGV[1], id, consumer, count) then
    local attempt = 0
    for f = at, at + 2 * fields - 2, 2 do
      if ARGV[f] == 'attempt' then
        attempt = tonumber(ARGV[f + 1]) or 0
      end
    end
    local ok, current = pcall(redis.call, 'HMGET', KEYS[i], 'state', 'attempt')
    if not ok and is_outcome(KEYS[i]) then  -- an outcome written as one JSON object
      current = {'outcome', false}
    elseif not ok then  -- written by something else: the record takes its place
      redis.call('DEL', KEYS[i])
      current = {false, false}
    end
    -- (an attempt that is not a count, numbers.lua, counts as none: the start replaces it)
    local state = current[1]
    local recorded = current[2] and checked_number(current[2], {integer = true, min = 0,
      digits = 15}) or 0
    if not state or (state == 'running' and recorded <= attempt)
        or (state == 'retrying' and recorded < attempt) then
      redis.call('HSET', KEYS[i], unpack(ARGV, at, at + 2 * fields - 1))
      redis.call('PEXPIRE', KEYS[i], ttl)
      written = written + 1
    end
  end
  at = at + 2 * fields
end
return written
