-- Start a workflow, in chunks (after lanes.lua, numbers.lua, locks.lua and workflows.lua):
-- its state and plan, then its roots' messages. Every plan chunk comes before the first
-- root, so no node can become ready before its template is written; the `adding` flag
-- keeps the workflow from settling while roots are still being added, and the last chunk
-- settles it if every root has ended already. A unique root (a plan field u:<i>) takes its
-- lock as it is added (wf_take_lock); a lock held fails it at once, and with fail-fast the
-- roots after it are not added.
-- KEYS[1..5] the workflow's keys: wf, plan, marks, res, err
-- KEYS[6]  the group's index of live workflows (a zset)
-- KEYS[7]  the task stream of the default lane (lanes.lua: a root may name another)
-- KEYS[8]  where moved tasks are (hash: task id -> stream id)
-- KEYS[9]  the cancel marks (hash: task id -> until, ms)
-- KEYS[10] the quarantine stream
-- KEYS[11] the queue's registry of groups (a set)
-- ARGV[1]  the workflow's id, W
-- ARGV[2]  '1' for the first chunk (the state is written), '0' for a later one
-- ARGV[3]  '1' for the last chunk (adding ends), '0' before
-- ARGV[4]  n, the number of nodes (first chunk)
-- ARGV[5]  '1' fail-fast, '0' not
-- ARGV[6]  how long a settled workflow is kept (ms)
-- ARGV[7]  how long a workflow may live at most (ms, from its dispatch)
-- ARGV[8]  its name
-- ARGV[9]  its trace context ('' for none)
-- ARGV[10] its outputs (which nodes' results are its result)
-- ARGV[11] its cancel mark ('<group> <id>': an earlier workflow's of this id is deleted)
-- ARGV[12] the cancel channel; ARGV[13] the done channel; ARGV[14] how long a cancel mark
--          holds (ms); ARGV[15] the largest message a runner reads (bytes)
-- ARGV[16] P, then P field/value pairs of the plan
-- then     R, then R pairs: a root's node index, its message
-- Returns  'ok'; 'exists' for a first chunk of a workflow that exists (nothing written);
--          for a later chunk of a workflow that no longer runs (cancelled meanwhile), its
--          state (nothing written); a WRONGTYPE error for keys of another type
local k = wf_keys(KEYS, 1)
local wid = ARGV[1]
local refused = wrong_type({[k.wf] = 'hash', [k.plan] = 'hash', [k.marks] = 'string',
  [k.res] = 'hash', [k.err] = 'hash', [KEYS[6]] = 'zset', [KEYS[8]] = 'hash',
  [KEYS[9]] = 'hash'})
if refused then
  return refused
end
local known, groups = pcall(redis.call, 'SCARD', KEYS[11]) -- another type: shared
local ctx = wf_context(KEYS[7], KEYS[8], KEYS[9], KEYS[6], KEYS[10], not known or groups > 1,
  ARGV[12], ARGV[13], ARGV[14], ARGV[15])
local n = tonumber(ARGV[4])
if ARGV[2] == '1' then
  if not n or n < 1 or n > 2147483648 then
    return redis.error_reply('ERR a workflow has from 1 to 2^31 nodes, not ' .. ARGV[4])
  end
  if redis.call('EXISTS', k.wf) == 1 then
    return 'exists'
  end
  redis.call('HSET', k.wf, 'state', 'running', 'n', n, 'live', 0, 'ok', 0, 'failures', 0,
    'cancelled', 0, 'adding', 1, 'ff', ARGV[5], 'keep', ARGV[6], 'created', ctx.now_ms,
    'name', ARGV[8], 'trace', ARGV[9], 'out', ARGV[10], 'mark', ARGV[11])
  redis.call('HDEL', KEYS[9], ARGV[11]) -- an earlier workflow's of this id, not this one's
  redis.call('SETBIT', k.marks, 2 * n - 1, 0) -- the whole bitmap, so that it expires too
  redis.call('ZADD', KEYS[6], ctx.now_ms, wid)
  redis.call('PEXPIRE', k.wf, ARGV[7])
  redis.call('PEXPIRE', k.marks, ARGV[7])
else
  local why = wf_usable(k)
  if why then
    return why == 'gone' and 'gone' or redis.error_reply('ERR workflow ' .. wid .. ': ' .. why)
  end
  local state = redis.call('HGET', k.wf, 'state')
  if state ~= 'running' then
    return state
  end
  n = tonumber(redis.call('HGET', k.wf, 'n'))
end
local at = 16
local plan = tonumber(ARGV[at])
if plan > 0 then
  for low = at + 1, at + 2 * plan, 2 * WF_SLICE do
    redis.call('HSET', k.plan, unpack(ARGV, low, math.min(low + 2 * WF_SLICE - 1, at + 2 * plan)))
  end
  wf_same_life(k, k.plan)
end
at = at + 2 * plan + 1
local roots = tonumber(ARGV[at])
local failed = false -- a unique root whose lock is held: ended at once
for r = 1, roots do
  if failed and redis.call('HGET', k.wf, 'state') ~= 'running' then
    break -- failed fast: the later chunks are refused too
  end
  local i, message = tonumber(ARGV[at + 2 * r - 1]), ARGV[at + 2 * r]
  if redis.call('SETBIT', k.marks, 2 * i, 1) == 0 then
    redis.call('HINCRBY', k.wf, 'live', 1)
    local lock, refused = nil, nil
    if string.find(message, '"unique_key":', 1, true) then -- a unique root's message says
      lock = redis.call('HGET', k.plan, 'u:' .. i)          -- so: no look for the others
    end
    if lock then
      redis.call('HDEL', k.plan, 'u:' .. i)
      refused = wf_take_lock(k, i, lock, message, ctx)
    end
    if refused then
      wf_end_node(k, wid, i, 'failed', '', '', refused, ctx)
      failed = true
    else
      local stream, suffix = message_lane(ctx.base, message)
      local entry = redis.call('XADD', stream, '*', 'payload', message)
      redis.call('HSET', ctx.where, wid .. '.' .. i, entry .. suffix)
    end
  end
end
if ARGV[3] == '1' then
  redis.call('HSET', k.wf, 'adding', 0)
end
if ARGV[3] == '1' or failed then
  wf_settle_if_idle(k, wid, ctx)
end
return 'ok'
