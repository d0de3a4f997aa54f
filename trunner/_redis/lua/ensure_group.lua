-- Create the consumer group on the queue's stream if it is missing, and record it in the
-- queue's registry of groups, atomically: once a second group reads the stream, the
-- registry says so to every script that would delete an acknowledged entry (ack.lua ...),
-- before the new group can read anything.
-- KEYS[1]  the task stream
-- KEYS[2]  the queue's registry of groups (a set)
-- ARGV[1]  the consumer group
-- ARGV[2]  the id to create it from ('0': the stream's start)
-- Returns  1 when the group was created, 0 when it existed
-- A registry of another type is left alone: every script reads it as 'shared' (nothing is
-- deleted on acknowledgement; the leaders trim the stream instead).
local names = {}
local exists = false
if redis.call('EXISTS', KEYS[1]) == 1 then
  for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    for i = 1, #group, 2 do
      if group[i] == 'name' then
        names[#names + 1] = group[i + 1]
        exists = exists or group[i + 1] == ARGV[1]
      end
    end
  end
end
local created = 0
if not exists then
  redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[1], ARGV[2], 'MKSTREAM')
  created = 1
end
local known, count = pcall(redis.call, 'SCARD', KEYS[2])
if not known then
  return created
end
if count == 0 then -- the first group registered: count those created before the registry
  for _, name in ipairs(names) do
    redis.call('SADD', KEYS[2], name)
  end
end
redis.call('SADD', KEYS[2], ARGV[1])
return created
