-- SHARES: the gateway's share table -> tenants (a tenant dropped: its waiting tasks back to pending); each tenant's
-- units in flight and waiting tasks
-- KEYS[1] tenants  KEYS[2] pending  KEYS[3] budget
-- ARGV[1] waiting key prefix  ARGV[2..] tenant, "<threads> <reserved>" pairs
-- Replaces the share table with the given one (a tenant left out has its waiting tasks put back at the front of
-- pending, where they are untenanted), and returns {tenant, in flight, waiting, ...}: the units of each tenant of
-- the table, and its waiting tasks.
--! include now
--! const UNIT_PREFIX GATEWAY_ID_PREFIX
local TENANT_UNIT = '^' .. UNIT_PREFIX .. GATEWAY_ID_PREFIX .. ':([a-z0-9%-]+):'
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
