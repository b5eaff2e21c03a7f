-- ADOPT: raw JSON task in processing -> its id at the front of pending (task hash created), or dropped when its id
-- is known already (a repeated push)
-- KEYS[1] processing  KEYS[2] leases  KEYS[3] task hash (of the id)  KEYS[4] orphans  KEYS[5] result (of the id)
-- KEYS[6] pending
-- ARGV[1] raw  ARGV[2] body  ARGV[3] task ttl  ARGV[4] id
-- Replaces a raw item by its id, at the front of pending (it is claimed again as a task, with a budget unit).
-- Returns ADOPTED, LOST (a reaper took the raw item back) or DUPLICATE (the id is known: the raw item is dropped).
local ADOPTED, LOST, DUPLICATE = 1, -1, -2
local processing, leases, task, orphans, result, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local raw, body, ttl, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if redis.call('LREM', processing, 1, raw) == 0 then return LOST end
redis.call('ZREM', leases, raw)
redis.call('ZREM', orphans, raw)
if redis.call('EXISTS', task) == 1 or redis.call('EXISTS', result) == 1 then return DUPLICATE end
redis.call('HSET', task, 'body', body)
redis.call('EXPIRE', task, ttl)
redis.call('LPUSH', pending, id)
return ADOPTED
