-- SPDX-License-Identifier: Apache-2.0
-- sluice: give back or renew the CONCURRENCY slots that src/redis/limits.lua gave requests.
--
-- KEYS      the slot sets (sorted sets of lease ids scored by when each lapses, in ms)
-- ARGV[1]   "release" or "renew"
-- ARGV[2]   release: the channel to announce a freed slot on; renew: now in unix ms, or "" to
--           read Redis TIME (an explicit time exists for tests, as in limits.lua)
-- then      release: per key, the lease id; the slots freed are announced, one message per
--                    distinct key of the call, "<count>:<key>" (PUBLISH channel ...), so that
--                    each instance wakes up to <count> of its waiters for that key (an instance
--                    without waiters for it does nothing). Every freed slot is announced:
--                    announcing only when the set was full would lose a wake-up when two slots
--                    free before a waiter takes the first. A batch of releases on one key (a
--                    burst of responses ending together) costs one message, not one per slot.
--           renew:   per key, the lease id and the lease in ms (the slot's new expiry is
--                    now + lease)
--
-- Returns, release: how many slots were freed; renew: how many slots were renewed (a slot whose
-- lease lapsed was taken away, and may be someone else's by now: it is not taken back).

local action = ARGV[1]
local per_key = action == 'renew' and 2 or 1
if #ARGV ~= 2 + per_key * #KEYS then
  return redis.error_reply('ERR sluice: expected ' .. per_key .. ' argument(s) per key')
end

local done = 0
if action == 'release' then
  local channel = ARGV[2]
  local freed, order = {}, {}
  for i, key in ipairs(KEYS) do
    -- pcall: another type under the key (a reload changed the limit's algorithm) frees nothing.
    if redis.pcall('ZREM', key, ARGV[2 + i]) == 1 then
      done = done + 1
      if freed[key] == nil then
        freed[key] = 0
        order[#order + 1] = key
      end
      freed[key] = freed[key] + 1
    end
  end
  for _, key in ipairs(order) do
    -- pcall: an ACL user without the channel (NOPERM) still gives its slots back; its
    -- instances' waiters then find them by asking again (every lease / 3).
    redis.pcall('PUBLISH', channel, freed[key] .. ':' .. key)
  end
elseif action == 'renew' then
  local now
  if ARGV[2] == '' then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  else
    now = math.floor(tonumber(ARGV[2]))
  end
  for i, key in ipairs(KEYS) do
    local member, lease = ARGV[1 + 2 * i], tonumber(ARGV[2 + 2 * i])
    local score = redis.pcall('ZSCORE', key, member)
    -- Renew only a lease that has not lapsed: a lapsed one may already count for another.
    if type(score) == 'string' and tonumber(score) > now then
      redis.call('ZADD', key, 'XX', string.format('%d', now + lease), member)
      if redis.call('PTTL', key) < lease then
        redis.call('PEXPIRE', key, lease)
      end
      done = done + 1
    end
  end
else
  return redis.error_reply('ERR sluice: unknown action ' .. tostring(action))
end
return done
