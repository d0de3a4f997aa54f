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
local info = group_info(KEYS[1], ARGV[1])
if info and type(info['lag']) == 'number' and type(info['pending']) == 'number' then
  return math.min(length, info['lag'] + info['pending'])
end
return length
