-- Acknowledge finished messages and, with delete-on-ack, remove them from the stream;
-- release the unique locks of those that hold one (only the lock each one took).
-- KEYS[1]  the task stream
-- KEYS[2..] the unique locks of some of the messages
-- ARGV[1]  the consumer group
-- ARGV[2]  '1' to XDEL the entries, '0' to keep them
-- ARGV[3]  how many entry ids follow (n)
-- ARGV[4..3+n] the entry ids (the caller sends at most 1000 per call)
-- ARGV[4+n..] one lock token per lock key, in KEYS order
-- Returns  how many entries were still pending and are now acknowledged
local n = tonumber(ARGV[3])
local ids = {unpack(ARGV, 4, 3 + n)}
local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
if ARGV[2] == '1' then
  redis.call('XDEL', KEYS[1], unpack(ids))
end
for i = 2, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[2 + n + i] then
    redis.call('DEL', KEYS[i])
  end
end
return acked
