-- RENEW: the owning worker's heartbeat: per item, its lease and its unit a lease longer, together.
-- KEYS[1] leases  KEYS[2] budget
-- ARGV[1] lease s  ARGV[2] worker  ARGV[3] task key prefix  then per item: item, task id ('' for a raw item), unit
-- ('' none)
-- Per item, atomically: while its lease exists and its task is not owned by another worker, the lease and the unit
-- are kept a lease from now (a hold is never shortened; a unit that had expired while its worker stalled is counted
-- again, its solve runs on). An item whose lease is gone (acked, buried, released or reaped) or whose task another
-- worker owns is left alone, unit included: a unit is renewed only with its lease. A unit the claim gave back
-- (UNIT_DROP: the task's unit_given is this worker) is never renewed nor counted again, whatever the heartbeat's
-- snapshot said: it may have been taken before the unit went back.
-- Returns {items not renewed, units counted again}.
--! include now
local RENEW_ARGS, FIRST_ARG = 3, 4
local leases, units, lease_s, worker, task_prefix = KEYS[1], KEYS[2], tonumber(ARGV[1]), ARGV[2], ARGV[3]
local lost, recounted = {}, {}
for i = FIRST_ARG, #ARGV, RENEW_ARGS do
  local item, tid, unit = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local f = tid ~= '' and redis.call('HMGET', task_prefix .. tid, 'owner', 'unit_given')
  local owner = f and f[1]
  if not redis.call('ZSCORE', leases, item) or (owner and owner ~= worker) then
    lost[#lost + 1] = item
  else
    redis.call('ZADD', leases, now + lease_s, item)
    if unit ~= '' and not (f and f[2] == worker) then
      if not redis.call('ZSCORE', units, unit) then recounted[#recounted + 1] = unit end
      redis.call('ZADD', units, 'GT', now + lease_s, unit)
    end
  end
end
return {lost, recounted}
