-- Set a delayed task aside: it leaves the delayed keys and is recorded, with its message,
-- in the quarantine stream (the leader's mover, when what is stored for it cannot be read).
-- (Behind the fence: KEYS[1] is the lease, ARGV[1] the leader's id.)
-- KEYS[2]  the delayed set
-- KEYS[3]  the delayed messages
-- KEYS[4]  the unique delayed tasks
-- KEYS[5]  the quarantine stream
-- ARGV[2]  the task id
-- ARGV[3]  approximate cap of the quarantine stream
-- ARGV[4..] field/value pairs of the record (the task's message is added as 'message')
-- Returns  1 when set aside, 0 when the task was no longer delayed
if redis.call('ZREM', KEYS[2], ARGV[2]) == 0 then
  return 0
end
local message = redis.call('HGET', KEYS[3], ARGV[2]) or ''
redis.call('HDEL', KEYS[3], ARGV[2])
redis.call('HDEL', KEYS[4], ARGV[2])
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[3], '*', 'message', message, unpack(ARGV, 4))
return 1
