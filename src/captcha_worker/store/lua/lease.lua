-- LEASE (BLMOVE+LEASE, the blocking path): after a BLMOVE pending -> processing, lease the item with its unit.
-- KEYS[1] processing  KEYS[2] leases  KEYS[3] orphans  KEYS[4] dead  KEYS[5] budget  KEYS[6] limits  KEYS[7] pending
-- KEYS[8] tenants
-- ARGV[1] item  then as CLAIM's ARGV[2..9]
-- Returns CLAIM's reply with no item when a reaper already took the item back, when a known tenant's task came (it
-- goes to its waiting list: the caller claims next, and the claim picks by share), or when no unit is free or the
-- tenants' reservations leave none (the item goes back to the front).
--! include now
--! include lease_item
--! include shares
local processing, pending, item = KEYS[1], KEYS[7], ARGV[1]
local c = claim_ctx({processing = processing, leases = KEYS[2], orphans = KEYS[3], dead = KEYS[4],
                     budget = KEYS[5], limits = KEYS[6]},
                    {lease_s = ARGV[2], task_prefix = ARGV[3], result_prefix = ARGV[4], max_bytes = ARGV[5],
                     dead_cap = ARGV[6], worker = ARGV[7], limit = ARGV[8]})
local s = shares_open({tenants = KEYS[8], waiting = ARGV[9]}, c.b)
local function reply(stop, fields)
  return {c.b.limit, c.b.in_use, stop, redis.call('LLEN', pending) + shares_waiting_total(s), fields}
end
if not redis.call('LPOS', processing, item) then return reply(STOP_NONE, {}) end
local tenant = shares_tenant(s, item)
if tenant and not shares_free(c.b, item) then
  redis.call('LREM', processing, -1, item)
  redis.call('RPUSH', s.waiting .. tenant, item)
  s.waiting_n[tenant] = s.waiting_n[tenant] + 1
  return reply(STOP_NONE, {})
end
local fields = (shares_free(c.b, item) or shares_may_take(s, c.b, NO_TENANT)) and lease(c, item)
if not fields then
  redis.call('LREM', processing, -1, item)
  redis.call('LPUSH', pending, item)
  return reply(c.b.in_use >= c.b.limit and c.b.limit ~= UNLIMITED and STOP_FULL or STOP_CAPPED, {})
end
leases_write(c)
return reply(STOP_NONE, fields)
