-- Give up the leadership lease if this instance holds it, and tell the followers at once.
-- KEYS[1]  the lease key
-- ARGV[1]  this instance's id
-- ARGV[2]  the pub/sub channel the followers listen on
-- Returns  1 when released, 0 when the lease was not ours
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], ARGV[1])
  return 1
end
return 0
