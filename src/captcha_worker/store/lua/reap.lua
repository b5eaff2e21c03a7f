-- REAP: expired lease, or lease-less item older than the orphan grace -> pending (front; a death counted). The unit
-- is left to expire or to be resumed.
-- KEYS[1] processing  KEYS[2] leases  KEYS[3] pending  KEYS[4] orphans
-- ARGV[1] orphan grace s  ARGV[2] max items per run  ARGV[3] task key prefix
-- Returns {expired requeued, orphans requeued}. Each requeue counts a worker death on the task; its budget unit is
-- left alone (it expires, or the next owner resumes its solve).
--! include now
local processing, leases, pending, orphans = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local grace, limit, task_prefix = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local function requeue(item, why)
  if redis.call('LREM', processing, 1, item) == 0 then return 0 end
  redis.call('LPUSH', pending, item)
  local task = task_prefix .. item
  if redis.call('EXISTS', task) == 1 then
    redis.call('HSET', task, 'last_error', why)
    redis.call('HINCRBY', task, 'deaths', 1)
    redis.call('HDEL', task, 'owner', 'unit_given')
  end
  return 1
end
local expired = 0
for _, item in ipairs(redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', leases, item)
  expired = expired + requeue(item, 'lease expired')
end
local orphaned = 0
for _, item in ipairs(redis.call('LRANGE', processing, 0, limit - 1)) do
  if not redis.call('ZSCORE', leases, item) then
    local seen = redis.call('ZSCORE', orphans, item)
    if not seen then
      redis.call('ZADD', orphans, now, item)
    elseif now - tonumber(seen) >= grace then
      redis.call('ZREM', orphans, item)
      orphaned = orphaned + requeue(item, 'orphaned after claim')
    end
  end
end
redis.call('ZREMRANGEBYSCORE', orphans, '-inf', now - 10 * grace)
return {expired, orphaned}
