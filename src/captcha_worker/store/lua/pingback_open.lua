-- PINGBACK_OPEN (pingback.Hub.open): a submission's record, before its in.php
-- KEYS[1] the record
-- ARGV[1] token hash  ARGV[2] worker  ARGV[3] TTL (ms)
-- Returns 1.
redis.call('HSET', KEYS[1], 'h', ARGV[1], 'w', ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
