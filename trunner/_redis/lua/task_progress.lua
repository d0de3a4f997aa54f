-- Record a running task's progress in its record (created if it has none), unless the
-- record already holds an outcome (a late report never writes over an end). A key of
-- another type (written by something else) is replaced.
-- Fenced: nothing is written unless the reporting attempt's delivery is still the pending
-- one (owns_delivery, deliveries.lua): a late attempt never writes over a live one.
-- KEYS[1]  the task's record
-- KEYS[2]  the task stream (of the entry's lane)
-- ARGV[1]  the record's time-to-live in ms, set when it has none
-- ARGV[2]  the consumer group
-- ARGV[3]  the entry id (in its stream)
-- ARGV[4]  the consumer the attempt's delivery is pending for
-- ARGV[5]  that delivery's count
-- ARGV[6..] field/value pairs: the progress, and what a new record needs
-- Returns  1 when written, 0 when the record holds an outcome or the delivery is no longer
--          the attempt's
-- is_outcome(key): whether the key holds an outcome written as one JSON object (ack.lua
-- writes a finished task's record so: a string starting with its state)
local function is_outcome(key)
  local ok, text = pcall(redis.call, 'GET', key)
  return ok and type(text) == 'string' and string.sub(text, 1, 9) == '{"state":'
end
if not owns_delivery(KEYS[2], ARGV[2], ARGV[3], ARGV[4], ARGV[5]) then
  return 0
end
local ok, state = pcall(redis.call, 'HGET', KEYS[1], 'state')
if not ok then  -- not a hash: an outcome written as one JSON object (ack.lua), or else
  if is_outcome(KEYS[1]) then  -- written by something else: the record takes its place
    return 0
  end
  redis.call('DEL', KEYS[1])
  state = false
end
if state and state ~= 'running' and state ~= 'retrying' then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV, 6))
if redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return 1
