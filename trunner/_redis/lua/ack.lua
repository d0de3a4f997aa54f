-- Acknowledge finished messages and, with delete-on-ack, remove them from the stream.
-- KEYS[1]  the task stream
-- ARGV[1]  the consumer group
-- ARGV[2]  '1' to XDEL the entries, '0' to keep them
-- ARGV[3..] the entry ids (the caller sends at most 1000 per call)
-- Returns  how many entries were still pending and are now acknowledged
local ids = {unpack(ARGV, 3)}
local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
if ARGV[2] == '1' then
  redis.call('XDEL', KEYS[1], unpack(ids))
end
return acked
