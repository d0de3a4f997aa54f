-- Fence, the first lines of every leader-only script: they write nothing unless the
-- leadership lease still holds this leader's id, so a deposed leader that has not noticed
-- yet cannot act. A fenced script's own keys start at KEYS[2], its arguments at ARGV[2].
-- KEYS[1]  the lease key
-- ARGV[1]  the leader's id
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('FENCED the leadership lease is not held by ' .. ARGV[1])
end
