-- Delivered, the first lines of the scripts that ask whether a stream entry that is not
-- pending was already delivered to a group (and so finished) or still waits to be read.
-- delivered_to(stream, group, entry id) -> true when the group's last-delivered-id is at
-- or after the entry
local function delivered_to(stream, group_name, entry)
  for _, group in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local name, last
    for i = 1, #group, 2 do
      if group[i] == 'name' then
        name = group[i + 1]
      elseif group[i] == 'last-delivered-id' then
        last = group[i + 1]
      end
    end
    if name == group_name then
      local a_ms, a_seq = string.match(entry, '^(%d+)-(%d+)$')
      local b_ms, b_seq = string.match(last, '^(%d+)-(%d+)$')
      a_ms, a_seq, b_ms, b_seq = tonumber(a_ms), tonumber(a_seq), tonumber(b_ms), tonumber(b_seq)
      return a_ms < b_ms or (a_ms == b_ms and a_seq <= b_seq)
    end
  end
  return false
end
