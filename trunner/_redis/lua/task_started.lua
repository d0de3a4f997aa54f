-- Record that tasks which keep their result started: their record says 'running', unless
-- it already holds an outcome (a start is never written over an end).
-- KEYS[1..n] the records
-- ARGV     per record, in KEYS order: its time-to-live (ms), F, then F field/value pairs
-- Returns  how many records were written
local at, written = 1, 0
for i = 1, #KEYS do
  local ttl, fields = ARGV[at], tonumber(ARGV[at + 1])
  at = at + 2
  local state = redis.call('HGET', KEYS[i], 'state')
  if not state or state == 'running' or state == 'retrying' then
    redis.call('HSET', KEYS[i], unpack(ARGV, at, at + 2 * fields - 1))
    redis.call('PEXPIRE', KEYS[i], ttl)
    written = written + 1
  end
  at = at + 2 * fields
end
return written
