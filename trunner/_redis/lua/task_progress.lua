-- Record a running task's progress in its record (created if it has none), unless the
-- record already holds an outcome (a late report never writes over an end). A key of
-- another type (written by something else) is replaced.
-- KEYS[1]  the task's record
-- ARGV[1]  the record's time-to-live in ms, set when it has none
-- ARGV[2..] field/value pairs: the progress, and what a new record needs
-- Returns  1 when written, 0 when the record holds an outcome
local ok, state = pcall(redis.call, 'HGET', KEYS[1], 'state')
if not ok then  -- not a hash: written by something else, the record takes its place
  redis.call('DEL', KEYS[1])
  state = false
end
if state and state ~= 'running' and state ~= 'retrying' then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
if redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return 1
