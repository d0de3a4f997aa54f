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
-- (The parts of ids are compared as decimal text, not as numbers: a double is exact only
-- up to 2^53, and a part may be as large as 2^64 - 1.)
local function compare_digits(a, b)
  a, b = string.gsub(a, '^0+(%d)', '%1'), string.gsub(b, '^0+(%d)', '%1')
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  if a == b then
    return 0
  end
  return a < b and -1 or 1
end
local function delivered_to(stream, group_name, entry)
  local info = group_info(stream, group_name)
  if not info then
    return false
  end
  local a_ms, a_seq = string.match(entry, '^(%d+)-(%d+)$')
  local b_ms, b_seq = string.match(info['last-delivered-id'], '^(%d+)-(%d+)$')
  local ms = compare_digits(a_ms, b_ms)
  return ms < 0 or (ms == 0 and compare_digits(a_seq, b_seq) <= 0)
end
