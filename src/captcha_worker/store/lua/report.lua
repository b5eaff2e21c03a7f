-- REPORT: a solved task's captcha id -> reports
-- KEYS[1] task hash  KEYS[2] reports
-- ARGV[1] verdict ('bad' / 'good')  ARGV[2] task id  ARGV[3] cap
-- Queues a report of a solved task's answer; returns its captcha id, or '' when the task was not solved at the API
-- (not yet, never, or so long ago that its record expired).
local task, reports, verdict, id, cap = KEYS[1], KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[3])
local captcha = redis.call('HGET', task, 'captcha_id')
if redis.call('HGET', task, 'state') ~= 'done' or not captcha then return '' end
redis.call('RPUSH', reports, string.format('{"id":"%s","captcha_id":"%s","verdict":"%s"}', id, captcha, verdict))
redis.call('LTRIM', reports, -cap, -1)
return captcha
