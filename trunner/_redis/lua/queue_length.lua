-- The group's queue length: the entries of the stream waiting for it or running (read-only).
-- With one group on the stream (the registry holds at most one), every entry of the stream
-- is the group's (XLEN). On a stream several groups read, entries another group has yet
-- to read are not this group's: its length is its lag (entries not yet delivered to it)
-- plus its pending entries (XINFO GROUPS); where Redis does not know the lag (after
-- entries were deleted in the middle), XLEN, an upper bound.
-- KEYS[1]  the task stream
-- KEYS[2]  the queue's registry of groups (a set)
-- ARGV[1]  the consumer group
-- Returns  the length
local length = redis.call('XLEN', KEYS[1])
local known, groups = pcall(redis.call, 'SCARD', KEYS[2])
if known and groups < 2 then
  return length
end
if length == 0 then
  return 0
end
for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local name, lag, pending
  for i = 1, #group, 2 do
    if group[i] == 'name' then
      name = group[i + 1]
    elseif group[i] == 'lag' then
      lag = group[i + 1]
    elseif group[i] == 'pending' then
      pending = group[i + 1]
    end
  end
  if name == ARGV[1] then
    if type(lag) == 'number' and type(pending) == 'number' then
      return math.min(length, lag + pending)
    end
    return length
  end
end
return length
