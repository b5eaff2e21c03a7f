-- shares: tenant shares of the plan inside a claim (``shares``): sort, pick, take. Needs `now`, the budget and
-- is_id. `s` is {tenants = key, waiting = key prefix}; `b` the opened budget.
--! include budget
--! include is_id
--! const GATEWAY_ID_PREFIX SORT_MAX LOOKAHEAD STOP_NONE STOP_FULL STOP_CAPPED
-- luacheck: push ignore 211
local TENANT_ITEM = '^' .. GATEWAY_ID_PREFIX .. ':([a-z0-9%-]+):%d+$'
local TENANT_UNIT = '^' .. UNIT_PREFIX .. GATEWAY_ID_PREFIX .. ':([a-z0-9%-]+):'
local NO_TENANT = ''
-- the share table, each tenant's units in flight and waiting tasks; units of no known tenant are `other`
local function shares_open(s, b)
  s.caps, s.used, s.waiting_n, s.names = {}, {}, {}, {}
  local flat = redis.call('HGETALL', s.tenants)
  for i = 1, #flat, 2 do
    local threads, reserved = string.match(flat[i + 1], '^(%d+) (%d+)$')
    if threads then
      local t = flat[i]
      s.caps[t] = {threads = tonumber(threads), reserved = tonumber(reserved)}
      s.used[t], s.names[#s.names + 1] = 0, t
      s.waiting_n[t] = redis.call('LLEN', s.waiting .. t)
    end
  end
  s.other, s.sort_left = b.in_use, SORT_MAX
  if #s.names > 0 then
    for _, unit in ipairs(redis.call('ZRANGE', b.units, 0, -1)) do
      local t = string.match(unit, TENANT_UNIT)
      if t and s.caps[t] then s.used[t], s.other = s.used[t] + 1, s.other - 1 end
    end
  end
  return s
end
-- the known tenant of an item, or nil
local function shares_tenant(s, item)
  if #item > 128 then return nil end
  local t = string.match(item, TENANT_ITEM)
  if t and s.caps[t] then return t end
  return nil
end
-- an item that needs no new unit: raw (none), or a task whose unit is still held (a resume)
local function shares_free(b, item)
  return not is_id(item) or redis.call('ZSCORE', b.units, UNIT_PREFIX .. item) ~= false
end
local function shares_waiting_total(s)
  local n = 0
  for _, t in ipairs(s.names) do n = n + s.waiting_n[t] end
  return n
end
-- 1. sort: known tenants' tasks at the head of pending go to their waiting lists
local function shares_sort(s, b, pending)
  while s.sort_left > 0 do
    local head = redis.call('LINDEX', pending, 0)
    if not head then return end
    local t = shares_tenant(s, head)
    if not t or shares_free(b, head) then return end
    redis.call('LMOVE', pending, s.waiting .. t, 'LEFT', 'RIGHT')
    s.waiting_n[t], s.sort_left = s.waiting_n[t] + 1, s.sort_left - 1
  end
end
-- the head of pending is an untenanted task the reservations hold back: sort the known tenants' tasks among the
-- next LOOKAHEAD too (a reservation's own tenant must not wait behind a task its reservation blocks)
local function shares_sort_behind(s, b, pending)
  for _, item in ipairs(redis.call('LRANGE', pending, 1, LOOKAHEAD)) do
    local t = shares_tenant(s, item)
    if t and not shares_free(b, item) and redis.call('LREM', pending, 1, item) == 1 then
      redis.call('RPUSH', s.waiting .. t, item)
      s.waiting_n[t] = s.waiting_n[t] + 1
    end
  end
end
-- threads the other tenants with work (in flight or waiting) reserved and do not use
local function shares_owed(s, except)
  local owed = 0
  for _, t in ipairs(s.names) do
    local cap, used = s.caps[t], s.used[t]
    if t ~= except and (used > 0 or s.waiting_n[t] > 0) and used < cap.reserved then
      owed = owed + cap.reserved - used
    end
  end
  return owed
end
-- whether tenant t (NO_TENANT: untenanted) may take one more thread
local function shares_may_take(s, b, t)
  local cap = s.caps[t]
  if cap then
    if s.used[t] >= cap.threads then return false end
    if s.used[t] < cap.reserved then return true end
  end
  if b.limit == UNLIMITED then return true end
  return b.limit - b.in_use - 1 >= shares_owed(s, t)
end
local function shares_load(s, b, t)
  if t == NO_TENANT then
    if b.limit == UNLIMITED then return 0 end
    return s.other / math.max(b.limit, 1)
  end
  return s.used[t] / math.max(s.caps[t].threads, 1)
end
-- 2. pick: {source list, tenant} to take from, or {false, stop reason}. `head` is the untenanted candidate's list
local function shares_pick(s, b, head)
  local item = head and redis.call('LINDEX', head, 0)
  if item and shares_free(b, item) then return {head, NO_TENANT} end
  if item and shares_tenant(s, item) then item = false end  -- left unsorted by SORT_MAX: sorted by the next call
  if b.limit ~= UNLIMITED and b.in_use >= b.limit and (item or shares_waiting_total(s) > 0) then
    return {false, STOP_FULL}
  end
  local best, best_t, best_load, waiting = false, NO_TENANT, math.huge, item and true or false  -- LINDEX: false
  if item and shares_may_take(s, b, NO_TENANT) then
    best, best_load = head, shares_load(s, b, NO_TENANT)
  elseif item then
    shares_sort_behind(s, b, head)
  end
  for _, t in ipairs(s.names) do
    if s.waiting_n[t] > 0 then
      waiting = true
      local load = shares_load(s, b, t)
      if load < best_load and shares_may_take(s, b, t) then best, best_t, best_load = s.waiting .. t, t, load end
    end
  end
  if best then return {best, best_t} end
  return {false, waiting and STOP_CAPPED or STOP_NONE}
end
-- 3. after the take: count the unit (when one was taken) and the item leaving its list
local function shares_took(s, t, unit_taken)
  if t == NO_TENANT then
    if unit_taken then s.other = s.other + 1 end
    return
  end
  s.waiting_n[t] = s.waiting_n[t] - 1
  if unit_taken then s.used[t] = s.used[t] + 1 end
end
-- luacheck: pop
