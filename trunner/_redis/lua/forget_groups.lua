-- Forget the groups of the queue's registry that no longer read its stream (destroyed by
-- hand with XGROUP DESTROY, or the stream deleted): with one group left, acknowledging
-- deletes again. A group is created and registered in one step (ensure_group.lua), so a
-- registered name without a group on the stream is one that is gone.
-- KEYS[1]  the task stream
-- KEYS[2]  the queue's registry of groups (a set)
-- Returns  the names forgotten
local known, members = pcall(redis.call, 'SMEMBERS', KEYS[2])
if not known or #members == 0 then
  return {}
end
local live = {}
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
if ok then
  for _, group in ipairs(groups) do
    for i = 1, #group, 2 do
      if group[i] == 'name' then
        live[group[i + 1]] = true
      end
    end
  end
end
local gone = {}
for _, name in ipairs(members) do
  if not live[name] then
    gone[#gone + 1] = name
  end
end
if #gone > 0 then
  redis.call('SREM', KEYS[2], unpack(gone))
end
return gone
