-- The janitor's look at a page of the group's index of live workflows (after
-- workflows.lua): an entry whose workflow is gone (its keys expired after the longest life
-- of a workflow), or settled, leaves the index; one whose keys trunner did not write as
-- they are (wf_usable, or a time of dispatch that is not one) leaves it too, and is named
-- so that the janitor sets it aside (its keys are left to expire); a workflow whose
-- producer stopped between its start chunks ('adding' still set, dispatched before the
-- given time) is named for the janitor to cancel (cancel_workflow.lua checks it again).
-- KEYS[1]  the group's index of live workflows (a zset)
-- then     five keys per workflow: wf, plan, marks, res, err
-- ARGV[1]  a workflow still adding its first steps and dispatched at least this long ago
--          (ms, by Redis's clock, which wrote the time of its dispatch) was abandoned by its
--          producer
-- ARGV[2..] the workflows' ids, in the order of their keys
-- Returns  per workflow: 'live', 'abandoned', 'gone' (out of the index), or why its keys
--          are not trunner's (out of the index)
local now = redis.call('TIME')
local cutoff = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) -
  (tonumber(ARGV[1]) or 0)
local verdicts = {}
for w = 2, #ARGV do
  local wid = ARGV[w]
  local k = wf_keys(KEYS, 2 + 5 * (w - 2))
  local why = wf_usable(k)
  local verdict = 'live'
  if why == 'gone' then
    verdict = 'gone'
  elseif why then
    verdict = why
  else
    local v = redis.call('HMGET', k.wf, 'state', 'adding', 'created')
    local created, bad = checked_number(v[3], {integer = true, digits = 15, min = 0})
    if not created then
      verdict = 'created: ' .. bad
    elseif WF_SETTLED[v[1]] then
      verdict = 'gone' -- settled: its settle left the index (or should have)
    elseif v[1] == 'running' and v[2] == '1' and cutoff and created <= cutoff then
      verdict = 'abandoned'
    end
  end
  if verdict ~= 'live' and verdict ~= 'abandoned' then
    redis.call('ZREM', KEYS[1], wid)
  end
  verdicts[#verdicts + 1] = verdict
end
return verdicts
