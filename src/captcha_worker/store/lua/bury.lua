-- BURY: processing + lease -> dead (+ result + reply push when the id is known)
-- KEYS[1] processing  KEYS[2] leases  KEYS[3] dead  KEYS[4] task hash  KEYS[5] result  KEYS[6] reply (= KEYS[5] when
-- none)  KEYS[7] budget
-- ARGV[1] item  ARGV[2] dead entry JSON  ARGV[3] dead cap  ARGV[4] result JSON or ''  ARGV[5] result ttl  ARGV[6]
-- reply ttl  ARGV[7] '1' = the item is a raw payload naming the id: answer only an unknown id (never pre-empt the
-- result of a real task of that id)  ARGV[8] worker  ARGV[9] unit ('' none)  ARGV[10] seconds to hold it
-- Returns {buried, answered}: buried 0 when the item was no longer in processing; answered 1 when the result was
-- written. A caller that no longer owns the task (another worker claimed it) buries nothing: {0, 0}.
--! include now
--! include deliver
local processing, leases, dead, task, result_key, reply_key, units = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5],
  KEYS[6], KEYS[7]
local item, entry, dead_cap, result, result_ttl, reply_ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5],
  ARGV[6]
local raw, worker, unit, hold_s = ARGV[7] == '1', ARGV[8], ARGV[9], tonumber(ARGV[10])
local mine = raw or owns(task, worker)
budget_settle(units, unit, hold_s, mine)
if not mine or redis.call('LREM', processing, 1, item) == 0 then return {0, 0} end
redis.call('ZREM', leases, item)
redis.call('LPUSH', dead, entry)
redis.call('LTRIM', dead, 0, dead_cap - 1)
local known = redis.call('EXISTS', task) == 1
if known and not raw then
  redis.call('HSET', task, 'state', 'dead')
  redis.call('HDEL', task, 'owner', 'unit_given')
  if hold_s > 0 then redis.call('HSET', task, 'captcha_until', string.format('%.3f', now + hold_s)) end
end
if known and raw then return {1, 0} end
return {1, deliver(result_key, reply_key, result, result_ttl, reply_ttl)}
