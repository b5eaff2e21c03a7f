-- RELEASE: processing + lease -> pending (front or back; an API-side failure counted or not; the unit held while the
-- solve may still run, so the next owner resumes it)
-- KEYS[1] processing  KEYS[2] leases  KEYS[3] pending  KEYS[4] task hash  KEYS[5] budget
-- ARGV[1] item  ARGV[2] '1' = count an API-side failure  ARGV[3] '1' = front  ARGV[4] last error ('' = keep)
-- ARGV[5] worker  ARGV[6] unit ('' none)  ARGV[7] seconds the solve may still run at the API (0: it is over)
-- ARGV[8] its captcha id ('' none)
-- Returns 1 if requeued; 0 when the item is no longer in processing or another worker owns the task now (the caller
-- stalled past its lease: the item is that worker's). With a solve still running, the id is recorded and the unit
-- held: the next owner resumes the solve instead of submitting again.
--! include now
--! include deliver
local processing, leases, pending, task, units = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local item, failure, front, last_error = ARGV[1], ARGV[2] == '1', ARGV[3] == '1', ARGV[4]
local worker, unit, hold_s, captcha = ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8]
local mine = owns(task, worker)
budget_settle(units, unit, hold_s, mine)
if not mine or redis.call('LREM', processing, 1, item) == 0 then return 0 end
redis.call('ZREM', leases, item)
if front then redis.call('LPUSH', pending, item) else redis.call('RPUSH', pending, item) end
if redis.call('EXISTS', task) == 1 then
  if failure then redis.call('HINCRBY', task, 'failures', 1) end
  if last_error ~= '' then redis.call('HSET', task, 'last_error', last_error) end
  redis.call('HDEL', task, 'owner', 'unit_given')
  if hold_s > 0 and captcha ~= '' then
    redis.call('HSET', task, 'captcha_id', captcha, 'captcha_until', string.format('%.3f', now + hold_s))
  elseif hold_s <= 0 then
    redis.call('HDEL', task, 'captcha_id', 'captcha_until')
  end
end
return 1
