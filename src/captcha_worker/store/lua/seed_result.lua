-- SEED_RESULT: a result -> the seed guide's results hash (seed-guide compatibility)
-- KEYS[1] the seed guide's results hash
-- ARGV[1] field (task id)  ARGV[2] entry JSON  ARGV[3] ttl s
-- The hash is bounded: its TTL is refreshed by every write, and each field expires by itself where the server has
-- HEXPIRE (Redis >= 7.4; pcall: older servers just keep the hash TTL). Returns 1.
local hash, field, entry, ttl = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
redis.call('HSET', hash, field, entry)
redis.call('EXPIRE', hash, ttl)
redis.pcall('HEXPIRE', hash, ttl, 'FIELDS', 1, field)
return 1
