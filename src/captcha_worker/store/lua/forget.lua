-- FORGET: a worker leaving (its goodbye) -> its heartbeat and every limit entry of its own go from workers, limits
-- KEYS[1] workers  KEYS[2] limits
-- ARGV[1] worker id
-- Every entry, not the one the worker believes it registered: a registration whose answer it never read (cut short
-- by its shutdown) may have landed. A higher limit may apply at once.
--! include limits
redis.call('ZREM', KEYS[1], ARGV[1])
limits_drop(KEYS[2], ARGV[1], nil)
