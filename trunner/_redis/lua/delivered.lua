-- Delivered, the first lines of the scripts that read a consumer group's progress.
-- group_info(stream, group) -> the group's fields from XINFO GROUPS (name, pending,
-- last-delivered-id, lag ...) as a table, or nil when the stream has no such group
-- delivered_to(stream, group, entry id) -> true when the group's last-delivered-id is at
-- or after the entry (an entry that is not pending was then already finished)
local function group_info(stream, group_name)
  for _, group in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local info = {}
    for i = 1, #group - 1, 2 do
      info[group[i]] = group[i + 1]
    end
    if info['name'] == group_name then
      return info
    end
  end
  return nil
end
local function delivered_to(stream, group_name, entry)
  local info = group_info(stream, group_name)
  if not info then
    return false
  end
  local a_ms, a_seq = string.match(entry, '^(%d+)-(%d+)$')
  local b_ms, b_seq = string.match(info['last-delivered-id'], '^(%d+)-(%d+)$')
  a_ms, a_seq, b_ms, b_seq = tonumber(a_ms), tonumber(a_seq), tonumber(b_ms), tonumber(b_seq)
  return a_ms < b_ms or (a_ms == b_ms and a_seq <= b_seq)
end
