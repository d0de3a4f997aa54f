-- Extend the leadership lease, only while this instance holds it.
-- KEYS[1]  the lease key
-- ARGV[1]  this instance's id
-- ARGV[2]  lease time-to-live (ms)
-- Returns  1 when renewed, 0 when the lease is not ours (expired or taken)
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
