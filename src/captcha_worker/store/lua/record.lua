-- RECORD: in.php answered: captcha id on the task hash, its unit held until the id can no longer be answered
-- KEYS[1] task hash  KEYS[2] budget
-- ARGV[1] worker  ARGV[2] unit  ARGV[3] captcha id  ARGV[4] seconds that id can be answered
-- The id goes on the task (the next owner resumes it) and the unit is held until then. Returns RECORDED, or STRAY
-- when another worker owns the task now (this one stalled past its lease): the solve then gets a unit of its own
-- (budget.stray_unit) and the task is left alone.
--! include now
--! const STRAY_MARK
local RECORDED, STRAY = 1, 0
local task, units, worker, unit, captcha, window = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local owner = redis.call('HGET', task, 'owner')
if owner and owner ~= worker then
  redis.call('ZADD', units, 'GT', now + window, unit .. STRAY_MARK .. captcha)
  return STRAY
end
if redis.call('EXISTS', task) == 1 then
  redis.call('HSET', task, 'captcha_id', captcha, 'captcha_until', string.format('%.3f', now + window))
end
redis.call('ZADD', units, 'GT', now + window, unit)
return RECORDED
