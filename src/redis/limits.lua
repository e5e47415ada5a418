-- SPDX-License-Identifier: Apache-2.0
-- sluice: decide every limit of one request in one atomic step.
--
-- KEYS[i]   the i-th limit's key, e.g. rate-limit:<ip>:<endpoint>
-- ARGV[1]   now in unix ms, or "" to read Redis TIME (an explicit time exists for tests; it is
--           floored to whole ms, as TIME is and as the memory store floors its clock)
-- ARGV[2]   ttl in ms (rate-limit.redis.ttl): the buckets' PEXPIRE on every write
-- then, per key, six fields (the i-th group starts at ARGV[3 + 6 * (i - 1)]):
--   algorithm  1 LEAKY_BUCKET, 2 TOKEN_BUCKET, 3 FIXED_WINDOW, 4 SLIDING_WINDOW
--   p1         buckets: capacity;                     windows: limit (requests per window)
--   p2         buckets: flowRate / refillRate per s;  windows: window in ms
--   mode       0 shape, 1 police (LEAKY_BUCKET only)
--   max_delay  ms, or -1 for none (LEAKY_BUCKET only)
--   dry_run    1: decided and reported, but never blocks the request
--
-- Returns one array per key: {allowed (0/1), remaining, reset_ms, retry_after_ms, delay_ms,
-- level}, where level is the state's count after this request (queue_size, tokens, the window's
-- count or the log's size) as it is stored if committed.
--
-- Data layout, one Redis key per limit key (numbers are stored with %.17g, which round-trips a
-- double exactly and prints whole numbers without a fraction):
--   LEAKY_BUCKET    hash {queue_size, last_leak_time (ms, may be fractional)}, PEXPIRE ttl
--   TOKEN_BUCKET    hash {tokens, last_refill_time (ms, may be fractional)}, PEXPIRE ttl
--   FIXED_WINDOW    hash {count, window_start (ms, a multiple of the window)}, expiring at the
--                   window's end (PEXPIRE of the time left in it, relative to the script's now so
--                   that an explicit test time works too; with TIME it is the same instant)
--   SLIDING_WINDOW  sorted set of the admissions in the window, scored by time (ms), members
--                   "<time>#<n>" (the n-th admission at that time: unique, since a time's
--                   members only ever leave together), never more than `limit` of them;
--                   PEXPIRE until the newest leaves the window (the window, normally)
-- A key holding another algorithm's state (the limit changed on reload) counts as no state, as
-- in the C++ (src/limiter/algorithm.cpp); writing the new state deletes the old one first.
--
-- Phase 1 decides every key without writing. Phase 2 runs only when every enforced (not dry-run)
-- limit admits, and then writes every key: either the request is charged on all its limits or
-- on none. A rejected request writes nothing, which also keeps rejections cheap. Phase 2 writes
-- whole states (HSET of the count decided in phase 1 rather than HINCRBY), and only the last
-- of several limits sharing one key: the memory store commits exactly so, and a second
-- increment would charge such a key twice.
--
-- The arithmetic is the C++ one (src/limiter/*.cpp) operation for operation, in doubles, with
-- the same epsilons, so both stores decide alike to the bit; keep them in step.

local LEAKY_BUCKET, TOKEN_BUCKET, FIXED_WINDOW, SLIDING_WINDOW = 1, 2, 3, 4
local SHAPE = 0
local GROUP = 6

-- src/limiter/leaky_bucket.cpp: sums of slots that are not whole ms land a hair off whole
-- values; both roundings of the buckets tolerate that much.
local SLOT_EPSILON = 1e-9
local MS_EPSILON = 1e-6

local function format_number(x)
  return string.format('%.17g', x)
end

-- The buckets' ceil_ms: std::ceil(std::max(0.0, ms - ms_epsilon)).
local function ceil_bucket_ms(ms)
  local x = ms - MS_EPSILON
  if x > 0 then
    return math.ceil(x)
  end
  return 0
end

-- The sliding window's ceil_ms: std::ceil(std::max(0.0, ms)).
local function ceil_ms(ms)
  if ms > 0 then
    return math.ceil(ms)
  end
  return 0
end

-- Two numeric fields of a hash, or nil when the key holds no such state (absent, another
-- algorithm's hash, or another type altogether: pcall turns WRONGTYPE into a value).
local function read_hash(key, field1, field2)
  local stored = redis.pcall('HMGET', key, field1, field2)
  if stored.err or not stored[1] or not stored[2] then
    return nil
  end
  local a, b = tonumber(stored[1]), tonumber(stored[2])
  if a == nil or b == nil then
    return nil
  end
  return a, b
end

---------------------------------------------------------------------------------------------------
-- The buckets: leak_and_admit of src/limiter/leaky_bucket.cpp. A token bucket is a leaky bucket
-- that never delays, seen from the other side: tokens = capacity - queue_size.

local function leak_and_admit(q, last, capacity, flow_rate, shaping, max_delay, now)
  local slot = 1000.0 / flow_rate
  if q == nil then
    q, last = 0, now
  end

  -- Leak whole slots; keep the fraction of the slot in progress. A clock behind `last` leaks
  -- nothing and never moves it back.
  if now > last then
    local leaked = math.floor((now - last) / slot + SLOT_EPSILON)
    if leaked >= q then
      q = 0
      last = now
    elseif leaked > 0 then
      q = q - leaked
      last = last + leaked * slot
    end
  end

  -- The new request would stand at position q + 1; the head leaves at `last`.
  local wait = last + q * slot - now
  local has_room = q + 1 <= capacity
  local wait_fits = (not shaping) or max_delay < 0 or wait <= max_delay + MS_EPSILON

  local r = { allowed = 0, retry_after = 0, delay = 0 }
  if has_room and wait_fits then
    q = q + 1
    r.allowed = 1
    if shaping then
      r.delay = ceil_bucket_ms(wait)
    end
  else
    -- Full: the next slot frees at last + T. Too long a wait: it shrinks one ms per ms.
    local until_ms
    if has_room then
      until_ms = wait - max_delay
    else
      until_ms = last + slot - now
    end
    r.retry_after = math.max(ceil_bucket_ms(until_ms), 1)
  end
  r.remaining = capacity - q
  r.reset = ceil_bucket_ms(last + q * slot - now)
  r.level = q
  r.last = last
  return r
end

local leaky_bucket = {}

function leaky_bucket.decide(key, p, now)
  local q, last = read_hash(key, 'queue_size', 'last_leak_time')
  local r = leak_and_admit(q, last, p.p1, p.p2, p.mode == SHAPE, p.max_delay, now)
  r.fresh = q == nil
  return r
end

function leaky_bucket.write(key, r, ttl)
  if r.fresh then
    redis.call('DEL', key)
  end
  redis.call('HSET', key, 'queue_size', string.format('%d', r.level),
             'last_leak_time', format_number(r.last))
  redis.call('PEXPIRE', key, ttl)
end

local token_bucket = {}

function token_bucket.decide(key, p, now)
  local tokens, last = read_hash(key, 'tokens', 'last_refill_time')
  local q = nil
  if tokens ~= nil then
    q = p.p1 - tokens
  end
  local r = leak_and_admit(q, last, p.p1, p.p2, false, -1, now)
  r.fresh = tokens == nil
  r.level = p.p1 - r.level
  return r
end

function token_bucket.write(key, r, ttl)
  if r.fresh then
    redis.call('DEL', key)
  end
  redis.call('HSET', key, 'tokens', string.format('%d', r.level),
             'last_refill_time', format_number(r.last))
  redis.call('PEXPIRE', key, ttl)
end

---------------------------------------------------------------------------------------------------
-- FIXED_WINDOW: src/limiter/fixed_window.cpp. Windows are aligned to multiples of the window
-- since the epoch; a stored window other than the current one (over, or not begun with a clock
-- that stepped back) counts from zero.

local fixed_window = {}

function fixed_window.decide(key, p, now)
  local limit, window = p.p1, p.p2
  local start = math.floor(now / window) * window
  local count, stored_start = read_hash(key, 'count', 'window_start')
  local r = { allowed = 0, retry_after = 0, delay = 0, fresh = count == nil, start = start }
  if count == nil or stored_start ~= start then
    count = 0
  end
  local until_end = math.ceil(start + window - now)
  if count + 1 <= limit then
    count = count + 1
    r.allowed = 1
  else
    r.retry_after = math.max(until_end, 1)
  end
  r.remaining = limit - count
  r.reset = until_end
  r.level = count
  return r
end

function fixed_window.write(key, r, _)
  -- A rejection leaves the current window's count as it was (a fresh count cannot reject).
  if r.allowed == 0 then
    return
  end
  if r.fresh then
    redis.call('DEL', key)
  end
  redis.call('HSET', key, 'count', string.format('%d', r.level),
             'window_start', format_number(r.start))
  redis.call('PEXPIRE', key, r.reset)
end

---------------------------------------------------------------------------------------------------
-- SLIDING_WINDOW: src/limiter/sliding_window.cpp, an exact log of the admissions in the window
-- (now - window, now]. Phase 1 only counts: what left the window is removed when writing, as the
-- C++ erases it only from the state it commits (with a clock that steps back, removing it on a
-- rejection would change later decisions).

local sliding_window = {}

function sliding_window.decide(key, p, now)
  local limit, window = p.p1, p.p2
  local after = '(' .. format_number(now - window)
  local count = redis.pcall('ZCOUNT', key, after, '+inf')
  local r = { allowed = 0, retry_after = 0, delay = 0, fresh = false, now = now }
  if type(count) ~= 'number' then
    r.fresh = true
    count = 0
  end
  local newest = nil
  if count > 0 then
    -- Everything left is inside the window, or newer than now (a clock that stepped back).
    newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  end
  if count < limit then
    r.allowed = 1
    r.member = format_number(now) .. '#' ..
               (r.fresh and 0 or redis.call('ZCOUNT', key, format_number(now), format_number(now)))
    count = count + 1
    if newest == nil or now > newest then
      newest = now
    end
  else
    -- A slot frees when the oldest admission leaves the window.
    local oldest = redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    r.retry_after = math.max(ceil_ms(tonumber(oldest[2]) + window - now), 1)
  end
  r.remaining = limit - count
  r.reset = 0
  if newest ~= nil then
    r.reset = ceil_ms(newest + window - now)
  end
  r.level = count
  r.window = window
  return r
end

function sliding_window.write(key, r, _)
  if r.fresh then
    redis.call('DEL', key)
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', format_number(r.now - r.window))
  if r.allowed == 1 then
    redis.call('ZADD', key, format_number(r.now), r.member)
  end
  if r.reset > 0 then
    redis.call('PEXPIRE', key, r.reset)
  end
end

---------------------------------------------------------------------------------------------------

local algorithms = {
  [LEAKY_BUCKET] = leaky_bucket,
  [TOKEN_BUCKET] = token_bucket,
  [FIXED_WINDOW] = fixed_window,
  [SLIDING_WINDOW] = sliding_window,
}

if #ARGV ~= 2 + GROUP * #KEYS then
  return redis.error_reply('ERR sluice: expected ' .. (2 + GROUP * #KEYS) .. ' arguments')
end

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = math.floor(tonumber(ARGV[1]))
end
local ttl = tonumber(ARGV[2])

-- Phase 1: decide every key, write nothing.
local decided = {}
local last_of = {}
local admit = true
for i, key in ipairs(KEYS) do
  local base = 2 + GROUP * (i - 1)
  local code = tonumber(ARGV[base + 1])
  local algorithm = algorithms[code]
  if algorithm == nil then
    return redis.error_reply('ERR sluice: unknown algorithm ' .. tostring(ARGV[base + 1]))
  end
  local p = {
    p1 = tonumber(ARGV[base + 2]),
    p2 = tonumber(ARGV[base + 3]),
    mode = tonumber(ARGV[base + 4]),
    max_delay = tonumber(ARGV[base + 5]),
  }
  if p.p1 == nil or p.p2 == nil or p.p2 <= 0 or p.max_delay == nil then
    return redis.error_reply('ERR sluice: bad parameters for key ' .. key)
  end
  local r = algorithm.decide(key, p, now)
  r.algorithm = algorithm
  decided[i] = r
  last_of[key] = i
  if r.allowed == 0 and ARGV[base + 6] ~= '1' then
    admit = false
  end
end

-- Phase 2: charge every limit, or none.
if admit then
  for i, key in ipairs(KEYS) do
    if last_of[key] == i then
      decided[i].algorithm.write(key, decided[i], ttl)
    end
  end
end

local out = {}
for i, r in ipairs(decided) do
  out[i] = { r.allowed, r.remaining, r.reset, r.retry_after, r.delay, r.level }
end
return out
