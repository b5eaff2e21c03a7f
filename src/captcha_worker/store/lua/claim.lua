-- CLAIM: pending, a tenant's waiting list or the compat list -> processing + lease + budget unit (batch,
-- non-blocking; owner recorded). Each item comes from the list shares_pick chose.
-- KEYS[1] pending  KEYS[2] processing  KEYS[3] leases  KEYS[4] orphans  KEYS[5] dead  KEYS[6] budget  KEYS[7] limits
-- KEYS[8] tenants  KEYS[9] compat list (absent when off)
-- ARGV[1] max items  ARGV[2] lease s  ARGV[3] task key prefix  ARGV[4] result key prefix  ARGV[5] max item bytes
-- ARGV[6] dead cap  ARGV[7] worker  ARGV[8] its limit  ARGV[9] waiting key prefix  ARGV[10] '1': claim without
-- budget units, from pending only (for overflow providers: their solves hold no plan thread)
-- Returns {effective limit, units in use, stop reason (shares.STOP_*), tasks waiting (pending and the tenants'
-- waiting lists), {lease() fields, flattened}}.
--! include now
--! include lease_item
--! include shares
local pending, processing, compat = KEYS[1], KEYS[2], KEYS[9]
local c = claim_ctx({processing = processing, leases = KEYS[3], orphans = KEYS[4], dead = KEYS[5],
                     budget = KEYS[6], limits = KEYS[7]},
                    {lease_s = ARGV[2], task_prefix = ARGV[3], result_prefix = ARGV[4], max_bytes = ARGV[5],
                     dead_cap = ARGV[6], worker = ARGV[7], limit = ARGV[8], no_unit = ARGV[10]})
local s = shares_open({tenants = KEYS[8], waiting = ARGV[9]}, c.b)
local wanted = tonumber(ARGV[1])
local out, stop = {}, STOP_NONE
-- no share table, no compat list and a unit free: shares_pick would answer the head of pending, whatever it is
local function quick(b)
  return #s.names == 0 and not compat and (b.limit == UNLIMITED or b.in_use < b.limit)
end
for _ = 1, wanted do
  local source, tenant = pending, NO_TENANT
  if not (c.no_unit or quick(c.b)) then
    shares_sort(s, c.b, pending)
    local head = pending
    if compat and redis.call('LLEN', pending) == 0 then head = compat end
    local pick = shares_pick(s, c.b, head)
    source, tenant = pick[1], pick[2]
  end
  if not source then stop = tenant; break end
  local item = redis.call('LMOVE', source, processing, 'LEFT', 'RIGHT')
  if not item then break end  -- the quick path on an empty pending list
  local before = c.b.in_use
  local fields = lease(c, item)
  if not fields then
    redis.call('LMOVE', processing, source, 'RIGHT', 'LEFT')
    stop = STOP_FULL
    break
  end
  shares_took(s, tenant, c.b.in_use > before)
  for _, v in ipairs(fields) do out[#out + 1] = v end
end
leases_write(c)
return {c.b.limit, c.b.in_use, stop, redis.call('LLEN', pending) + shares_waiting_total(s), out}
