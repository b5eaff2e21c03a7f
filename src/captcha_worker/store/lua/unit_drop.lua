-- UNIT_DROP: a job gives its plan-thread unit back (its task is solved at a per-solve provider): budget -> free,
-- and the task hash remembers it (field unit_given = the worker) so that no renewal of this claim counts it again.
-- KEYS[1] budget  KEYS[2] task hash
-- ARGV[1] unit  ARGV[2] worker
-- The unit goes and unit_given is set only while `worker` owns the task (or nobody does): a worker that lost its
-- task to another one (it stalled past its lease) leaves the new owner's unit alone. unit_given goes with the owner
-- field (ACK, BURY, RELEASE, REAP, requeue), so the task's next claim renews its unit again. RENEW reads it in the
-- same atomic step as the lease: a heartbeat whose snapshot was taken before this ran (and reaches Redis after) no
-- longer re-creates the unit. Returns 1 if given back, 0 when another worker owns the task.
local units, task, unit, worker = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local owner = redis.call('HGET', task, 'owner')
if owner and owner ~= worker then return 0 end
redis.call('ZREM', units, unit)
if owner then redis.call('HSET', task, 'unit_given', worker) end
return 1
