-- HEARTBEAT: a worker alive, and the limit it enforces -> workers, limits; returns the counts (lib/counts.lua).
-- KEYS as lib/counts.lua
-- ARGV[1] alive window s  ARGV[2] worker id  ARGV[3] its limits member (budget.limit_member)
-- ARGV[4] how long its limit holds without a heartbeat (s)  ARGV[5] its limit  ARGV[6] waiting key prefix
-- The member replaces every other entry of this worker (the limit it enforced before a plan change, whichever the
-- worker last saw land). The worker sends one registration at a time (Worker._register), so none lands after a
-- newer one.
--! include now
--! include limits
--! include budget
local workers_key, limits_key = KEYS[5], KEYS[6]
local worker, member, hold_s, own = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('ZADD', workers_key, now, worker)
redis.call('ZREMRANGEBYSCORE', workers_key, '-inf', now - 3600)
limits_drop(limits_key, worker, member)
redis.call('ZADD', limits_key, now + hold_s, member)
redis.call('ZREMRANGEBYSCORE', limits_key, '-inf', now)
--! include counts
