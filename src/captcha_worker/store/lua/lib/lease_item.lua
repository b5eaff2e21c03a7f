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
-- the leases are collected (c.leased, score-member pairs) and written by leases_write at the end of the script
local function leased(c, item, flag)
  c.leased[#c.leased + 1] = now + c.lease_s
  c.leased[#c.leased + 1] = item
  if c.any_orphans then redis.call('ZREM', c.orphans, item) end
  return {item, false, 0, 0, flag, false, false, false}
end
local function leases_write(c)
  batched('ZADD', c.leases, c.leased)
end
local function lease(c, item)
  if #item > c.max_bytes then return bury_too_large(c, item) end
  if not is_id(item) then return leased(c, item, FLAG_NONE) end
  local task = c.task_prefix .. item
  -- one read of the task hash: finished?, its counts, a solve left running, the body
  local f = redis.call('HMGET', task, 'state', 'failures', 'deaths', 'captcha_id', 'captcha_until', 'body')
  if f[1] or redis.call('EXISTS', c.result_prefix .. item) == 1 then return leased(c, item, FLAG_DONE) end
  local body = f[6]
  if not body or #body == 0 then return leased(c, item, FLAG_NONE) end
  if #body > c.max_bytes then return leased(c, item, FLAG_BODY_TOO_LARGE) end
  local unit = UNIT_PREFIX .. item
  if c.no_unit then unit = false  -- claimed for an overflow provider: no plan thread
  elseif budget_take(c.b, unit, c.lease_s) == BUDGET_FULL then return nil end
  leased(c, item, FLAG_NONE)
  redis.call('HSET', task, 'owner', c.worker)
  local left = false
  if f[4] and f[5] then left = string.format('%.3f', tonumber(f[5]) - now) end
  return {item, body, tonumber(f[2] or 0), tonumber(f[3] or 0), FLAG_NONE, unit, f[4], left}
end
local function claim_ctx(k, a)
  return {processing = k.processing, leases = k.leases, orphans = k.orphans, dead = k.dead, leased = {},
          any_orphans = redis.call('EXISTS', k.orphans) == 1,  -- almost never: no ZREM per item then
          lease_s = tonumber(a.lease_s), task_prefix = a.task_prefix, result_prefix = a.result_prefix,
          max_bytes = tonumber(a.max_bytes), dead_cap = tonumber(a.dead_cap), worker = a.worker,
          no_unit = a.no_unit == '1',
          b = budget_open({units = k.budget, limits = k.limits, own = tonumber(a.limit)})}
end
-- luacheck: pop
