-- ACK: processing + lease -> result (NX) + reply push (task body dropped, tombstone kept; unit released, or held
-- while the API may still be solving). A batch of ACKs, one call.
-- KEYS[1] processing  KEYS[2] leases  KEYS[3] budget  then per ack (ACK_KEYS): task hash, result, reply list (= its
-- result key: none)
-- ARGV[1] result ttl  ARGV[2] reply ttl  then per ack (ACK_ARGS): item, result JSON ('' = drop the item: its result
-- exists), worker, unit ('' none), seconds to hold it (0: release), captcha id of the answer, kept on the tombstone
-- for reports ('' none)
-- Returns, per ack, 1 if its result won. The task hash loses its body and stays, until its TTL, as a tombstone.
-- The releases of units, the removal of leases and the reply pushes of the batch are collected and sent at the end,
-- one command each (per reply list: one RPUSH, one EXPIRE) rather than one per ack: nothing in the batch reads them
-- in between (budget_settle applies a collected release before a later hold of the same unit).
--! const ACK_KEYS ACK_ARGS
local FIRST_KEY, FIRST_ARG, HOLD = 4, 3, 4  -- HOLD: offset in an ack's args
local acks = (#KEYS - FIRST_KEY + 1) / ACK_KEYS
local now = 0  -- server time, read only when a unit is to be held: the common path needs none
for i = 0, acks - 1 do
  if tonumber(ARGV[FIRST_ARG + ACK_ARGS * i + HOLD]) > 0 then
    local clock = redis.call('TIME')
    now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
    break
  end
end
--! include deliver
local processing, leases, units, result_ttl, reply_ttl = KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2]
-- A worker that no longer owns the task (it stalled past its lease and another one claimed it) only delivers its
-- result (first writer wins): the item, its lease and the task hash stay the new owner's.
local drops, pushes, gone = {set = {}}, {keys = {}, values = {}}, {}
local function ack(task, result_key, reply_key, item, result, worker, unit, hold_s, captcha)
  local mine, owned = owns(task, worker)
  budget_settle(units, unit, hold_s, mine, drops)
  if not mine then return deliver(result_key, reply_key, result, result_ttl, reply_ttl, pushes) end
  redis.call('LREM', processing, 1, item)
  gone[#gone + 1] = item
  local won = deliver(result_key, reply_key, result, result_ttl, reply_ttl, pushes)
  if result ~= '' and (owned or redis.call('EXISTS', task) == 1) then  -- an owner: the hash exists
    -- HSET first: a hash left without fields would be deleted, and its TTL lost. The tombstone keeps the captcha id
    -- of the result delivered (for reports): a result written first keeps its own.
    if won == 1 and captcha ~= '' then
      redis.call('HSET', task, 'state', 'done', 'captcha_id', captcha)
      redis.call('HDEL', task, 'body', 'owner', 'unit_given', 'captcha_until')
    elseif won == 1 then
      redis.call('HSET', task, 'state', 'done')
      redis.call('HDEL', task, 'body', 'owner', 'unit_given', 'captcha_until', 'captcha_id')
    else
      redis.call('HSET', task, 'state', 'done')
      redis.call('HDEL', task, 'body', 'owner', 'unit_given', 'captcha_until')
    end
    -- a unit held past the outcome (the solve may still run at the API): the tombstone says until when (AUDIT)
    if hold_s > 0 then redis.call('HSET', task, 'captcha_until', string.format('%.3f', now + hold_s)) end
  end
  return won
end
local won = {}
for i = 0, acks - 1 do
  local k, a = FIRST_KEY + ACK_KEYS * i, FIRST_ARG + ACK_ARGS * i
  won[i + 1] = ack(KEYS[k], KEYS[k + 1], KEYS[k + 2], ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],
                   tonumber(ARGV[a + HOLD]), ARGV[a + 5])
end
batched('ZREM', leases, gone)
budget_drop(units, drops)
deliver_pushes(pushes, reply_ttl)
return won
