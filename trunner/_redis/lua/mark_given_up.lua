-- Mark a message of this consumer as given up and not dead-lettered (its failed-task
-- handler raised): add the mark to its delivery count, so that its next delivery calls the
-- handler again instead of running the task. XCLAIM to the same consumer with RETRYCOUNT
-- is not a delivery; its idle time restarts, as with a heartbeat.
-- KEYS[1]  the task stream
-- ARGV[1]  the consumer group
-- ARGV[2]  this consumer (only its own entry is marked)
-- ARGV[3]  the mark
-- ARGV[4]  the entry id
-- ARGV[5]  the delivery count of the attempt that gave it up: nothing is written unless
--          it is still the pending delivery (owns_delivery, deliveries.lua)
-- Returns  1 when the entry is pending for this attempt's delivery, else 0
if not owns_delivery(KEYS[1], ARGV[1], ARGV[4], ARGV[2], ARGV[5]) then
  return 0
end
local count = tonumber(ARGV[5])
local mark = tonumber(ARGV[3])
if count < mark then
  count = count + mark
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[4], 'RETRYCOUNT', count, 'JUSTID')
return 1
