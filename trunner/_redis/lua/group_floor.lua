-- Record the group's floor: the id below which every message of the stream is finished
-- for this group (its oldest pending entry, or else the next one to deliver). With
-- delete_on_ack=False the stream keeps finished messages: a lost group is recreated from
-- its floor, so that it runs nothing older again.
-- KEYS[1]  the task stream
-- KEYS[2]  the floor (a string: a stream id)
-- ARGV[1]  the consumer group
-- Returns  the floor recorded, or false when the stream or the group does not exist, or
--          when an id has a part beyond 15 digits (an entry id written by hand: ids are
--          added up as numbers, exact to 2^53 only; the floor recorded before stays)
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  local part = {integer = true, digits = 15}
  return {checked_number(ms, part), checked_number(seq, part)}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return false
end
local info = group_info(KEYS[1], ARGV[1])
local floor
if info then
  floor = parse(info['last-delivered-id'])
  if not (floor[1] and floor[2]) then
    return false
  end
  floor[2] = floor[2] + 1
  local pending = redis.call('XPENDING', KEYS[1], ARGV[1])
  if pending[2] then
    local oldest = parse(pending[2])
    if not (oldest[1] and oldest[2]) then
      return false
    end
    if oldest[1] < floor[1] or (oldest[1] == floor[1] and oldest[2] < floor[2]) then
      floor = oldest
    end
  end
end
if not floor then
  return false
end
local id = string.format('%d-%d', floor[1], floor[2])
redis.call('SET', KEYS[2], id)
return id
