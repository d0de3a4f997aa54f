-- Claim messages whose consumer has been silent for min-idle: it died, or released them.
-- KEYS[1]  the task stream
-- ARGV[1]  the consumer group
-- ARGV[2]  the claiming consumer
-- ARGV[3]  min idle time (ms)
-- ARGV[4]  cursor ('0-0' to start a scan)
-- ARGV[5]  the most entries to claim
-- Returns  {next cursor, {{id, fields, deliveries}, ...}}
-- (XAUTOCLAIM scans at most 10 * count pending entries per call.)
local res = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5])
local out = {}
for i, entry in ipairs(res[2]) do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], entry[1], entry[1], 1)
  local deliveries = 1
  if p[1] then
    deliveries = p[1][4]
  end
  out[i] = {entry[1], entry[2] or {}, deliveries}
end
return {res[1], out}
