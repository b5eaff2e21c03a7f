-- deliver: shared by ACK, BURY and RELEASE: write the result once and notify the producer (deliver); whether the
-- caller still owns the task (owns); budget_settle.
--! include budget_settle
-- luacheck: push ignore 211
-- NO_REPLY: a reply key equal to the result key means the producer listens on no reply list (it reads the result)
local function deliver(result_key, reply_key, result, result_ttl, reply_ttl)
  local NO_REPLY = reply_key == result_key
  if result == '' then return 0 end
  if not redis.call('SET', result_key, result, 'NX', 'EX', result_ttl) then
    -- the same result again: a batch run again after its connection failed (durable writes), already delivered
    if redis.call('GET', result_key) == result then return 1 end
    return 0
  end
  if not NO_REPLY then
    redis.call('RPUSH', reply_key, result)
    redis.call('EXPIRE', reply_key, reply_ttl)
  end
  return 1
end
local function owns(task, worker)
  local owner = redis.call('HGET', task, 'owner')
  return not owner or owner == worker, owner ~= false
end
-- luacheck: pop
