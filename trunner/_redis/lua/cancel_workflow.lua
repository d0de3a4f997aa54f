-- Cancel a workflow (after key_types.lua, numbers.lua, lanes.lua and workflows.lua): a
-- running one turns 'cancelling' (a failing one stays failing: its failures win), and one
-- cancel mark with one PUBLISH cancels every step of it wherever it runs; a step queued or
-- waiting is taken out by the sweep that follows (cancel_steps.lua), or dropped when it is
-- fetched (the mark), and a step's retry is not scheduled (retry.lua). No step starts after this call. It settles once every step it started has
-- ended (at once when none is live).
-- KEYS[1..5] the workflow's keys: wf, plan, marks, res, err
-- KEYS[6]  the group's index of live workflows
-- KEYS[7]  the task stream of the default lane
-- KEYS[8]  where moved tasks are
-- KEYS[9]  the cancel marks
-- KEYS[10] the quarantine stream
-- KEYS[11] the queue's registry of groups (a set)
-- ARGV[1]  the workflow's id
-- ARGV[2]  the cancel channel; ARGV[3] the done channel; ARGV[4] how long a cancel mark
--          holds (ms); ARGV[5] the largest message a runner reads
-- ARGV[6]  (optional: the janitor's) cancel only a workflow its producer abandoned: still
--          running and adding its first steps, dispatched at least this long ago (ms, by
--          Redis's clock, which wrote the time of its dispatch)
-- Returns  its state after the call ('gone' when there is no such workflow; with ARGV[6],
--          the state of one not abandoned, nothing written); an error naming what is wrong
--          with keys trunner did not write
local k = wf_keys(KEYS, 1)
local wid = ARGV[1]
local why = wf_usable(k)
if why == 'gone' then
  return 'gone'
end
if why then
  return redis.error_reply('ERR workflow ' .. wid .. ': ' .. why)
end
local known, groups = pcall(redis.call, 'SCARD', KEYS[11]) -- another type: shared
local ctx = wf_context(KEYS[7], KEYS[8], KEYS[9], KEYS[6], KEYS[10], not known or groups > 1,
  ARGV[2], ARGV[3], ARGV[4], ARGV[5])
local state = redis.call('HGET', k.wf, 'state')
if WF_SETTLED[state] then
  return state
end
if ARGV[6] then
  local v = redis.call('HMGET', k.wf, 'adding', 'created')
  local created = checked_number(v[2] or '', {integer = true, digits = 15, min = 0})
  local cutoff = ctx.now_ms - (tonumber(ARGV[6]) or 0)
  if state ~= 'running' or v[1] ~= '1' or not created or created > cutoff then
    return state
  end
end
if state == 'running' then
  redis.call('HSET', k.wf, 'state', 'cancelling')
end
redis.call('HSET', k.wf, 'cancel', 1) -- said by WorkflowFailed.cancelled, if it fails
wf_cancel_steps(k, ctx)
wf_settle_if_idle(k, wid, ctx)
return redis.call('HGET', k.wf, 'state')
