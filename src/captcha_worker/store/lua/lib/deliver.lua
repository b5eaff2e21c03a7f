-- deliver: shared by ACK, BURY and RELEASE: write the result once and notify the producer (deliver); whether the
-- caller still owns the task (owns); budget_settle.
--! include budget_settle
-- luacheck: push ignore 211
-- NO_REPLY: a reply key equal to the result key means the producer listens on no reply list (it reads the result).
-- `pushes` (optional; ACK's batch): the reply is collected there, by reply list in order, and deliver_pushes sends
-- one RPUSH and one EXPIRE per list at the end instead of both per result.
local function deliver(result_key, reply_key, result, result_ttl, reply_ttl, pushes)
  local NO_REPLY = reply_key == result_key
  if result == '' then return 0 end
  if not redis.call('SET', result_key, result, 'NX', 'EX', result_ttl) then
    -- the same result again: a batch run again after its connection failed (durable writes), already delivered
    if redis.call('GET', result_key) == result then return 1 end
    return 0
  end
  if NO_REPLY then return 1 end
  if pushes then
    local values = pushes.values[reply_key]
    if not values then
      values = {}
      pushes.values[reply_key] = values
      pushes.keys[#pushes.keys + 1] = reply_key
    end
    values[#values + 1] = result
  else
    redis.call('RPUSH', reply_key, result)
    redis.call('EXPIRE', reply_key, reply_ttl)
  end
  return 1
end
local function deliver_pushes(pushes, reply_ttl)
  for _, reply_key in ipairs(pushes.keys) do
    batched('RPUSH', reply_key, pushes.values[reply_key])
    redis.call('EXPIRE', reply_key, reply_ttl)
  end
end
local function owns(task, worker)
  local owner = redis.call('HGET', task, 'owner')
  return not owner or owner == worker, owner ~= false
end
-- luacheck: pop
