-- Release messages of this consumer for immediate reclaim by any consumer: hand them to
-- the 'released' consumer with a large idle time. A delivery that never ran the task (the
-- message was fetched but not started, or interrupted by shutdown) is given back, so it
-- does not count as an attempt.
-- KEYS[1]  the task stream
-- ARGV[1]  the consumer group
-- ARGV[2]  this consumer (only its own entries are released)
-- ARGV[3]  the 'released' consumer
-- ARGV[4]  idle time to set (ms)
-- ARGV[5..] pairs: entry id, deliveries to give back (0 or 1)
-- Returns  how many entries were released
local released = 0
for i = 5, #ARGV, 2 do
  local id = ARGV[i]
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if p[1] and p[1][2] == ARGV[2] then
    local count = p[1][4] - tonumber(ARGV[i + 1])
    if count < 0 then
      count = 0
    end
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, id,
      'IDLE', ARGV[4], 'RETRYCOUNT', count, 'JUSTID')
    released = released + 1
  end
end
return released
