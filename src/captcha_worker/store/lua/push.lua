-- PUSH: producer -> pending (task hash written with TTL; a known id is left alone: idempotent)
-- KEYS[1] pending  then per task: KEYS[2k] task hash, KEYS[2k+1] result
-- ARGV[1] ttl  ARGV[2] '1' = push to the front  ARGV[3..] id, body pairs
-- A task whose id is known (hash or result exists) is left alone: a repeated submit is a no-op.
-- Returns how many tasks were new.
local pending, ttl, front = KEYS[1], ARGV[1], ARGV[2] == '1'
local ids = {}
for k = 1, (#KEYS - 1) / 2 do
  local task, result = KEYS[2 * k], KEYS[2 * k + 1]
  local id, body = ARGV[2 * k + 1], ARGV[2 * k + 2]
  if redis.call('EXISTS', task) == 0 and redis.call('EXISTS', result) == 0 then
    redis.call('HSET', task, 'body', body)
    redis.call('EXPIRE', task, ttl)
    ids[#ids + 1] = id
  end
end
if #ids > 0 then
  if front then redis.call('LPUSH', pending, unpack(ids)) else redis.call('RPUSH', pending, unpack(ids)) end
end
return #ids
