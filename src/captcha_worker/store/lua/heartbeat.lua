-- HEARTBEAT: a worker alive, and the limit it enforces -> workers, limits; returns the counts (lib/counts.lua).
-- KEYS as lib/counts.lua
-- ARGV[1] alive window s  ARGV[2] worker id  ARGV[3] its limits member  ARGV[4] its previous member ('' none)
-- ARGV[5] how long its limit holds without a heartbeat (s)  ARGV[6] its limit  ARGV[7] waiting key prefix
--! include now
--! include budget
local workers_key, limits_key = KEYS[5], KEYS[6]
local worker, member, previous, hold_s, own = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
redis.call('ZADD', workers_key, now, worker)
redis.call('ZREMRANGEBYSCORE', workers_key, '-inf', now - 3600)
if previous ~= '' and previous ~= member then redis.call('ZREM', limits_key, previous) end
redis.call('ZADD', limits_key, now + hold_s, member)
redis.call('ZREMRANGEBYSCORE', limits_key, '-inf', now)
--! include counts
