-- Extend the reservation of running messages (reset their idle time) while they are ours.
-- XCLAIM ... JUSTID does not count as a delivery.
-- KEYS[1]  the task stream
-- ARGV[1]  the consumer group
-- ARGV[2]  this consumer
-- ARGV[3..] entry ids (the caller sends at most 1000 per call)
-- Returns  the ids that are no longer ours (claimed by another consumer, or gone)
local lost = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
