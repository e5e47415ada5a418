-- SPDX-License-Identifier: Apache-2.0
-- sluice: decide every limit of one request in one atomic step.
--
-- KEYS[i]   the i-th limit's key, e.g. rate-limit:<ip>:<endpoint> (a hash)
-- ARGV[1]   now in unix ms, or "" to read Redis TIME (an explicit time exists for tests)
-- ARGV[2]   ttl in ms, set with PEXPIRE on every key written
-- then, per key, six fields (the i-th group starts at ARGV[3 + 6 * (i - 1)]):
--   algorithm  1 LEAKY_BUCKET, 2 TOKEN_BUCKET, 3 FIXED_WINDOW, 4 SLIDING_WINDOW
--   p1         LEAKY_BUCKET: capacity
--   p2         LEAKY_BUCKET: flowRate, requests per second (fractions allowed)
--   mode       0 shape, 1 police
--   max_delay  ms, or -1 for none
--   dry_run    1: decided and reported, but never blocks the request
--
-- Returns one array per key: {allowed (0/1), remaining, reset_ms, retry_after_ms, delay_ms,
-- queue_size}, where queue_size is the level after this request (as it is stored if committed).
--
-- Phase 1 decides every key without writing. Phase 2 runs only when every enforced (not dry-run)
-- limit admits, and then writes every key: either the request is charged on all its limits or
-- on none. A rejected request writes nothing (its leaked state need not be stored: the leak is
-- recomputed from the stored one next time), which also keeps rejections cheap.
--
-- The arithmetic is the C++ one (src/limiter/leaky_bucket.cpp) operation for operation, in
-- doubles, so both stores decide alike to the bit; keep them in step. Numbers are stored with
-- %.17g, which round-trips a double exactly and prints whole numbers without a fraction.

local LEAKY_BUCKET, TOKEN_BUCKET, FIXED_WINDOW, SLIDING_WINDOW = 1, 2, 3, 4
local SHAPE = 0
local GROUP = 6

-- ceil(max(0, ms)), as std::ceil(std::max(0.0, ms))
local function ceil_ms(ms)
  if ms > 0 then
    return math.ceil(ms)
  end
  return 0
end

local function format_number(x)
  return string.format('%.17g', x)
end

---------------------------------------------------------------------------------------------------
-- LEAKY_BUCKET: hash fields queue_size (integer) and last_leak_time (ms, may be fractional).

local leaky_bucket = {}

function leaky_bucket.decide(key, capacity, flow_rate, mode, max_delay, now)
  local stored = redis.call('HMGET', key, 'queue_size', 'last_leak_time')
  local exists = stored[1] and stored[2]
  local slot = 1000.0 / flow_rate
  local q, last = 0, now
  if exists then
    q = tonumber(stored[1])
    last = tonumber(stored[2])
  end

  -- Leak whole slots; keep the fraction of the slot in progress. A clock behind `last` leaks
  -- nothing and never moves it back.
  if now > last then
    local leaked = math.floor((now - last) / slot)
    if leaked >= q then
      q = 0
      last = now
    elseif leaked > 0 then
      q = q - leaked
      last = last + leaked * slot
    end
  end

  local shaping = mode == SHAPE
  -- The new request would stand at position q + 1; the head leaves at `last`.
  local wait = last + q * slot - now
  local has_room = q + 1 <= capacity
  local wait_fits = (not shaping) or max_delay < 0 or wait <= max_delay

  local r = { allowed = 0, retry_after = 0, delay = 0 }
  if has_room and wait_fits then
    q = q + 1
    r.allowed = 1
    if shaping then
      r.delay = ceil_ms(wait)
    end
  else
    local until_ms
    if has_room then
      until_ms = wait - max_delay
    else
      until_ms = last + slot - now
    end
    r.retry_after = math.max(ceil_ms(until_ms), 1)
  end
  r.remaining = capacity - q
  r.reset = ceil_ms(last + q * slot - now)
  r.level = q
  r.last = last
  return r
end

function leaky_bucket.write(key, r, ttl)
  redis.call('HSET', key, 'queue_size', string.format('%d', r.level),
             'last_leak_time', format_number(r.last))
  redis.call('PEXPIRE', key, ttl)
end

---------------------------------------------------------------------------------------------------
-- Slots for the other algorithms: each is a table with decide(key, p1, p2, mode, max_delay, now)
-- returning {allowed, remaining, reset, retry_after, delay, level} and write(key, r, ttl).

local algorithms = {
  [LEAKY_BUCKET] = leaky_bucket,
  -- [TOKEN_BUCKET] = token_bucket,      -- TODO(issue: TOKEN_BUCKET on Redis)
  -- [FIXED_WINDOW] = fixed_window,      -- TODO(issue: FIXED_WINDOW on Redis)
  -- [SLIDING_WINDOW] = sliding_window,  -- TODO(issue: SLIDING_WINDOW on Redis)
}

---------------------------------------------------------------------------------------------------

if #ARGV ~= 2 + GROUP * #KEYS then
  return redis.error_reply('ERR sluice: expected ' .. (2 + GROUP * #KEYS) .. ' arguments')
end

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local ttl = tonumber(ARGV[2])

-- Phase 1: decide every key, write nothing.
local decided = {}
local admit = true
for i, key in ipairs(KEYS) do
  local base = 2 + GROUP * (i - 1)
  local code = tonumber(ARGV[base + 1])
  local algorithm = algorithms[code]
  if algorithm == nil then
    return redis.error_reply('ERR sluice: algorithm ' .. tostring(ARGV[base + 1]) ..
                             ' is not implemented in the script')
  end
  local p1, p2 = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
  if p1 == nil or p2 == nil or p2 <= 0 then
    return redis.error_reply('ERR sluice: bad parameters for key ' .. key)
  end
  local r = algorithm.decide(key, p1, p2, tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5]), now)
  r.algorithm = algorithm
  decided[i] = r
  if r.allowed == 0 and ARGV[base + 6] ~= '1' then
    admit = false
  end
end

-- Phase 2: charge every limit, or none.
if admit then
  for i, key in ipairs(KEYS) do
    decided[i].algorithm.write(key, decided[i], ttl)
  end
end

local out = {}
for i, r in ipairs(decided) do
  out[i] = { r.allowed, r.remaining, r.reset, r.retry_after, r.delay, r.level }
end
return out
