-- LOOKUP: result, or the state of the id: queued / finished (result expired) / unknown
-- KEYS[2k-1] result, KEYS[2k] task hash of the k-th id
-- Returns per id: its result JSON, or a marker (queue.Lookup).
local QUEUED, FINISHED, UNKNOWN = 'queued', 'finished', ''
local out = {}
for i = 1, #KEYS, 2 do
  local result, task = redis.call('GET', KEYS[i]), KEYS[i + 1]
  if result then out[#out + 1] = result
  elseif redis.call('HEXISTS', task, 'state') == 1 then out[#out + 1] = FINISHED
  elseif redis.call('EXISTS', task) == 1 then out[#out + 1] = QUEUED
  else out[#out + 1] = UNKNOWN end
end
return out
