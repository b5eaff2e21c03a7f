"""Tenant shares of the plan, enforced by the claim: a tenant's cap (``threads``), its reservation (``reserved``),
and a fair choice between tenants so that none blocks another.

Keys (their rows are in ``queue``'s key table too):

* ``{q}:tenants`` (hash) ``tenant -> "<threads> <reserved>"``: the share table, published whole by the gateway
  (SHARES, every few seconds; a tenant dropped from it has its waiting tasks put back into pending).
* ``{q}:waiting:<tenant>`` (list): the tenant's tasks the claim sorted out of pending, oldest first.

A tenant's *in flight* is its budget units (``t:gw:<tenant>:…``, ``budget``): a solve left running by a worker that
died still counts against its tenant, as it does against the plan. The claim (CLAIM, and LEASE after a blocking
BLMOVE) works in three steps, in the same script as its budget acquire:

1. *sort*: tasks of known tenants at the head of pending move to their tenant's waiting list (at most
   :data:`SORT_MAX` per call), so a flood sits in the flooder's own list, never in front of anyone;
2. *pick*: among the waiting lists whose tenant may take a thread, and the head of pending (untenanted tasks: the
   producer library, seed-guide producers, tenants not in the table; they compete as one tenant whose share is the
   whole plan), the one with the lowest ``in flight / threads``. A tenant may take a thread when it is below its
   ``threads`` and either inside its ``reserved``, or leaves after taking it enough free threads for the unmet
   reservations of the other tenants with work (in flight or waiting). A resumed solve (its unit still held) and a
   raw item (no unit) are taken at once. When the head of pending is an untenanted task the reservations hold back,
   the known tenants' tasks among the next :data:`LOOKAHEAD` are sorted too, so a reservation's own tenant never
   waits behind a task that its reservation blocks;
3. *take*: the picked list's head moves to processing and is leased with its unit (``budget``).

When tasks wait but no tenant may take a thread, the claim stops with :data:`STOP_CAPPED`; the worker tries again
as its own solves end (or within 0.2 s). Caps may add up to more than the plan (overbooking): the plan budget is
checked by the unit itself. KEDA sees the waiting lists as triggers of its one metric (the chart lists one per
configured tenant).
"""

from __future__ import annotations

from captcha_worker.budget import UNIT_PREFIX

#: gateway task ids are ``gw:<tenant>:<public id>`` (gateway.ids): the tenant is read from the id
GATEWAY_ID_PREFIX = "gw"
#: tasks moved from pending to waiting lists per claim call (bounds a call's work under a flood)
SORT_MAX = 2000
#: tasks behind an untenanted head that reservations hold back, looked at for known tenants' tasks (per claim)
LOOKAHEAD = 100
#: a claim's stop reasons (CLAIM and LEASE reply): none, no budget unit free, every waiting task's tenant capped
STOP_NONE, STOP_FULL, STOP_CAPPED = 0, 1, 2

# Needs `now`, budget.LUA and `is_id` (queue's lease code). `s` is {tenants = key, waiting = key prefix}; `b` the
# opened budget.
LUA = f"""
local TENANT_ITEM = '^{GATEWAY_ID_PREFIX}:([a-z0-9%-]+):%d+$'
local TENANT_UNIT = '^{UNIT_PREFIX}{GATEWAY_ID_PREFIX}:([a-z0-9%-]+):'
local SORT_MAX, LOOKAHEAD = {SORT_MAX}, {LOOKAHEAD}
local STOP_NONE, STOP_FULL, STOP_CAPPED = {STOP_NONE}, {STOP_FULL}, {STOP_CAPPED}
""" + """
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
"""

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# SHARES. KEYS[1] tenants  KEYS[2] pending  KEYS[3] budget | ARGV[1] waiting key prefix  ARGV[2..] tenant, "<threads>
# <reserved>" pairs.   Replaces the share table with the given one (a tenant left out has its waiting tasks put
# back at the front of pending, where they are untenanted), and returns {tenant, in flight, waiting, ...}: the
# units of each tenant of the table, and its waiting tasks.
SHARES = _NOW + f"""
local TENANT_UNIT = '^{UNIT_PREFIX}{GATEWAY_ID_PREFIX}:([a-z0-9%-]+):'
""" + """
local tenants, pending, units, waiting = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local wanted, names = {}, {}
for i = 2, #ARGV, 2 do wanted[ARGV[i]] = ARGV[i + 1]; names[#names + 1] = ARGV[i] end
for _, t in ipairs(redis.call('HKEYS', tenants)) do
  if not wanted[t] then
    redis.call('HDEL', tenants, t)
    while redis.call('LMOVE', waiting .. t, pending, 'RIGHT', 'LEFT') do end
  end
end
local used = {}
for _, t in ipairs(names) do
  redis.call('HSET', tenants, t, wanted[t])
  used[t] = 0
end
redis.call('ZREMRANGEBYSCORE', units, '-inf', now)
for _, unit in ipairs(redis.call('ZRANGE', units, 0, -1)) do
  local t = string.match(unit, TENANT_UNIT)
  if t and used[t] then used[t] = used[t] + 1 end
end
local out = {}
for _, t in ipairs(names) do
  out[#out + 1] = t; out[#out + 1] = used[t]; out[#out + 1] = redis.call('LLEN', waiting .. t)
end
return out
"""


def share_value(threads: int, reserved: int) -> str:
    """A tenant's entry in ``{q}:tenants``."""
    return f"{threads} {reserved}"
