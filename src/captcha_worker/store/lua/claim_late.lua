-- CLAIM_LATE: named items of pending -> processing + lease, without budget units (issue 27, routing on a deadline:
-- the worker predicted they would miss their deadline waiting for a plan thread; a per-solve provider solves
-- them). An item no longer in pending (claimed meanwhile by any worker, or reaped) is skipped: each is claimed once.
-- KEYS[1] pending  KEYS[2] processing  KEYS[3] leases  KEYS[4] orphans  KEYS[5] dead  KEYS[6] budget  KEYS[7] limits
-- ARGV[1..7] as CLAIM's ARGV[2..8] (lease s, task key prefix, result key prefix, max item bytes, dead cap, worker,
-- its limit)  ARGV[8..] the items
-- Returns CLAIM's reply: {effective limit, units in use, STOP_NONE, pending's length, {lease() fields, flattened}}.
--! include now
--! include lease_item
--! include shares
local pending, processing = KEYS[1], KEYS[2]
local c = claim_ctx({processing = processing, leases = KEYS[3], orphans = KEYS[4], dead = KEYS[5],
                     budget = KEYS[6], limits = KEYS[7]},
                    {lease_s = ARGV[1], task_prefix = ARGV[2], result_prefix = ARGV[3], max_bytes = ARGV[4],
                     dead_cap = ARGV[5], worker = ARGV[6], limit = ARGV[7], no_unit = '1'})
local out = {}
for i = 8, #ARGV do
  local item = ARGV[i]
  if redis.call('LREM', pending, 1, item) == 1 then
    redis.call('RPUSH', processing, item)
    for _, v in ipairs(lease(c, item)) do out[#out + 1] = v end
  end
end
leases_write(c)
return {c.b.limit, c.b.in_use, STOP_NONE, redis.call('LLEN', pending), out}
