-- Delete a consumer from the group, only when it has no pending entries (deleting one
-- that has would make them unclaimable).
-- KEYS[1]  the task stream
-- ARGV[1]  the consumer group
-- ARGV[2]  the consumer
-- Returns  1 when deleted, 0 when it still has pending entries
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #p > 0 then
  return 0
end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
