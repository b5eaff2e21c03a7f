-- counts: the end of STATS and HEARTBEAT. KEYS[1] pending  KEYS[2] processing  KEYS[3] dead  KEYS[4] budget
-- KEYS[5] workers  KEYS[6] limits  KEYS[7] tenants | ARGV[1] worker alive window s, the last ARGV the waiting key
-- prefix, and the caller's own limit in a local `own`.   Everything `stats` shows, in one reply: the list lengths
-- (pending counts the tenants' waiting lists too: tasks no worker holds), units in use, workers alive, the
-- effective limit.
--! include budget
local pending, processing, dead, units, workers, limits, tenants = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5],
  KEYS[6], KEYS[7]
local alive_s, waiting_prefix = tonumber(ARGV[1]), ARGV[#ARGV]
local b = budget_open({units = units, limits = limits, own = own})
local waiting = 0
for _, tenant in ipairs(redis.call('HKEYS', tenants)) do
  waiting = waiting + redis.call('LLEN', waiting_prefix .. tenant)
end
return {redis.call('LLEN', pending) + waiting, redis.call('LLEN', processing), redis.call('LLEN', dead), b.in_use,
        redis.call('ZCOUNT', workers, now - alive_s, '+inf'), b.limit}
