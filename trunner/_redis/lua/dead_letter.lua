-- Give up on a message: acknowledge it and copy it to the dead-letter stream, atomically;
-- release its unique lock if it holds one.
-- KEYS[1]  the task stream
-- KEYS[2]  the dead-letter stream
-- KEYS[3]  (optional) the message's unique lock
-- ARGV[1]  the consumer group
-- ARGV[2]  '1' to XDEL the entry
-- ARGV[3]  the entry id
-- ARGV[4]  approximate cap of the dead-letter stream ('0': no cap)
-- ARGV[5]  the unique lock's token ('' when there is no lock)
-- ARGV[6..] field/value pairs of the dead-letter entry
-- Returns  the dead-letter entry id; false when the entry was no longer pending
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[3]) == 0 then
  return false
end
if ARGV[2] == '1' then
  redis.call('XDEL', KEYS[1], ARGV[3])
end
if KEYS[3] and redis.call('GET', KEYS[3]) == ARGV[5] then
  redis.call('DEL', KEYS[3])
end
if ARGV[4] == '0' then
  return redis.call('XADD', KEYS[2], '*', unpack(ARGV, 6))
end
return redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', unpack(ARGV, 6))
