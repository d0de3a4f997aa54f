-- Take the leadership lease if nobody holds it; on success, draw the next fence number.
-- KEYS[1]  the lease key
-- KEYS[2]  the fence counter (same hash slot as the lease)
-- ARGV[1]  this instance's id
-- ARGV[2]  lease time-to-live (ms)
-- Returns  the new fence number (> 0) when acquired, 0 when someone else holds the lease
if not redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then
  return 0
end
return redis.call('INCR', KEYS[2])
