-- lease_item: shared by CLAIM and LEASE: lease one item that is in processing. lease(c, item) returns its fields
-- {item, body|false, failures, deaths, flag, unit|false, captcha id|false, seconds that id can still be
-- answered|false} (flags as queue.ClaimFlag), or nil when it needs a budget unit and none is free (the caller puts it
-- back). A raw item over the size limit is buried here, unread: {sha1, false, size, 0, too large, ...}. `c`
-- (claim_ctx) holds the keys and arguments, `c.b` the opened budget. Needs `now`.
--! include budget
--! include is_id
--! const TOO_LARGE FLAG_NONE FLAG_DONE FLAG_ITEM_TOO_LARGE FLAG_BODY_TOO_LARGE
-- luacheck: push ignore 211
local function bury_too_large(c, item)
  redis.call('LREM', c.processing, -1, item)
  redis.call('ZREM', c.leases, item)
  local sha1 = redis.sha1hex(item)
  redis.call('LPUSH', c.dead, string.format('{"id":null,"reason":"payload is %d bytes, over the limit of %d",'
    .. '"code":"%s","attempts":1,"at":%.3f,"view":"(%d bytes, sha1 %s)"}',
    #item, c.max_bytes, TOO_LARGE, now, #item, sha1))
  redis.call('LTRIM', c.dead, 0, c.dead_cap - 1)
  return {sha1, false, #item, 0, FLAG_ITEM_TOO_LARGE, false, false, false}
end
local function leased(c, item, flag)
  redis.call('ZADD', c.leases, now + c.lease_s, item)
  if c.any_orphans then redis.call('ZREM', c.orphans, item) end
  return {item, false, 0, 0, flag, false, false, false}
end
local function lease(c, item)
  if #item > c.max_bytes then return bury_too_large(c, item) end
  if not is_id(item) then return leased(c, item, FLAG_NONE) end
  local task = c.task_prefix .. item
  if redis.call('EXISTS', c.result_prefix .. item) == 1 or redis.call('HEXISTS', task, 'state') == 1 then
    return leased(c, item, FLAG_DONE)
  end
  local size = redis.call('HSTRLEN', task, 'body')
  if size == 0 then return leased(c, item, FLAG_NONE) end
  if size > c.max_bytes then return leased(c, item, FLAG_BODY_TOO_LARGE) end
  local unit = UNIT_PREFIX .. item
  if budget_take(c.b, unit, c.lease_s) == BUDGET_FULL then return nil end
  leased(c, item, FLAG_NONE)
  redis.call('HSET', task, 'owner', c.worker)
  local f = redis.call('HMGET', task, 'failures', 'deaths', 'captcha_id', 'captcha_until', 'body')
  local left = false
  if f[3] and f[4] then left = string.format('%.3f', tonumber(f[4]) - now) end
  return {item, f[5], tonumber(f[1] or 0), tonumber(f[2] or 0), FLAG_NONE, unit, f[3], left}
end
local function claim_ctx(k, a)
  return {processing = k.processing, leases = k.leases, orphans = k.orphans, dead = k.dead,
          any_orphans = redis.call('EXISTS', k.orphans) == 1,  -- almost never: no ZREM per item then
          lease_s = tonumber(a.lease_s), task_prefix = a.task_prefix, result_prefix = a.result_prefix,
          max_bytes = tonumber(a.max_bytes), dead_cap = tonumber(a.dead_cap), worker = a.worker,
          b = budget_open({units = k.budget, limits = k.limits, own = tonumber(a.limit)})}
end
-- luacheck: pop
