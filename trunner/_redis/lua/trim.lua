-- Trim finished messages older than a cutoff from the stream (the leader's janitor, with
-- delete_on_ack=False). Never trims a message that some group of the stream has not yet
-- delivered, or that is still pending.
-- (Behind the fence: KEYS[1] is the lease, ARGV[1] the leader's id.)
-- KEYS[2]  the task stream (of one lane)
-- KEYS[3]  the queue's registry of groups (a set): while a group it names has no consumer
--          group on this stream (it reads other lanes only, so far), nothing is trimmed:
--          what waits in the lane is that group's too, once it reads it
-- ARGV[2]  the cutoff: messages with ids below <cutoff ms>-0 may go
-- ARGV[3]  the most entries to trim in this call (approximately)
-- Returns  {entries trimmed, the id trimmed below}; nothing is trimmed while a group's id
--          has a part beyond 15 digits (an entry id written by hand: ids are compared
--          and added up as numbers, exact to 2^53 only)
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  local part = {integer = true, digits = 15}
  return {checked_number(ms, part), checked_number(seq, part)}
end
local function less(a, b)
  return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2])
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {0, '0-0'}
end
local bound = {tonumber(ARGV[2]), 0}
local groups = redis.call('XINFO', 'GROUPS', KEYS[2])
local ok, registered = pcall(redis.call, 'SMEMBERS', KEYS[3])
if not ok then -- another type: which groups read the queue cannot be told
  return {0, '0-0'}
end
local here = {}
for _, group in ipairs(groups) do
  for i = 1, #group, 2 do
    if group[i] == 'name' then
      here[group[i + 1]] = true
    end
  end
end
for _, name in ipairs(registered) do
  if not here[name] then
    return {0, '0-0'}
  end
end
for _, group in ipairs(groups) do
  local name, delivered
  for i = 1, #group, 2 do
    if group[i] == 'name' then
      name = group[i + 1]
    elseif group[i] == 'last-delivered-id' then
      delivered = group[i + 1]
    end
  end
  local next_id = parse(delivered)
  if not (next_id[1] and next_id[2]) then
    return {0, '0-0'}
  end
  next_id[2] = next_id[2] + 1
  if less(next_id, bound) then
    bound = next_id
  end
  local pending = redis.call('XPENDING', KEYS[2], name)
  if pending[2] then
    local oldest = parse(pending[2])
    if not (oldest[1] and oldest[2]) then
      return {0, '0-0'}
    end
    if less(oldest, bound) then
      bound = oldest
    end
  end
end
local minid = string.format('%d-%d', bound[1], bound[2])
local trimmed = redis.call('XTRIM', KEYS[2], 'MINID', '~', minid, 'LIMIT', ARGV[3])
return {trimmed, minid}
