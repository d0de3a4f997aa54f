-- An instance's report, once a second: add its timing samples to the group's metrics,
-- refresh its membership, and read the capacity the leader decided. One round trip.
-- KEYS[1]  the metrics hash (field -> running total, since the last reset)
-- KEYS[2]  the live instances (id scored by last-seen ms)
-- KEYS[3]  the instances' details (id -> JSON)
-- KEYS[4]  the capacity the leader decided (hash: value, fence, version)
-- ARGV[1]  this instance's id
-- ARGV[2]  now (ms)
-- ARGV[3]  this instance's details (JSON)
-- ARGV[4..] field/increment pairs for the metrics hash (at most 1000 fields); a field
--          ending in ':max' holds a maximum: the larger of the two values is kept (a
--          sample sent with an exponent, '1.5e-05', is stored in decimals, to the ns)
-- Returns  {capacity value or false, capacity version or false, replaced}: replaced is a
--          flat list of the fields (and their values) that held no number, written by
--          something else: each is replaced by this report's increment. (A maximum is
--          read by checked_number, numbers.lua: 'nan' or 'inf' would never be exceeded.)
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
local replaced = {}
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
if #ARGV > 3 then
  redis.call('HSETNX', KEYS[1], 'since', ARGV[2])
  for i = 4, #ARGV, 2 do
    local field, value = ARGV[i], ARGV[i + 1]
    if string.sub(field, -4) == ':max' then
      local stored = redis.call('HGET', KEYS[1], field)
      local current = nil
      if stored then
        current = checked_number(stored, {min = 0})
        if not current then
          replaced[#replaced + 1] = field
          replaced[#replaced + 1] = stored
        end
      end
      local sample = tonumber(value)
      if not current or sample > current then
        if not checked_number(value, {min = 0}) then -- a sample sent as '1.5e-05': stored
          value = string.format('%.9f', sample)      -- as the next report reads it
        end
        redis.call('HSET', KEYS[1], field, value)
      end
    else
      local added = redis.pcall('HINCRBYFLOAT', KEYS[1], field, value)
      if type(added) == 'table' and added['err'] then
        replaced[#replaced + 1] = field
        replaced[#replaced + 1] = redis.call('HGET', KEYS[1], field) or ''
        redis.call('HSET', KEYS[1], field, value)
      end
    end
  end
end
local capacity = redis.call('HMGET', KEYS[4], 'value', 'version')
return {capacity[1], capacity[2], replaced}
