-- SPDX-License-Identifier: Apache-2.0
-- sluice: decide a batch of requests, each with all its limits, in one atomic step.
--
-- One call decides the requests of a batch one after the other, in order, exactly as separate
-- calls at the same instant would (a request sees what the ones before it wrote). The store
-- batches the requests that arrive in one turn of a worker's event loop, and those that come
-- while its previous call is in flight (at most 128), so a busy worker pays the script's fixed
-- costs (the call itself, TIME, argument parsing) once per batch instead of once per request.
-- It is called by EVALSHA (or EVAL) as a script, or on Redis 7 by FCALL as the Function
-- sluice_limits_<sha1 of this file>, with the same keys and arguments (see decide_batch below).
--
-- KEYS      the batch's distinct keys, e.g. rate-limit:<ip>:<endpoint>
-- ARGV[1]   now in unix ms, or "" to read Redis TIME (an explicit time exists for tests; it is
--           floored to whole ms, as TIME is and as the memory store floors its clock)
-- ARGV[2]   ttl in ms (rate-limit.redis.ttl): the buckets' PEXPIRE on every write
-- ARGV[3]   L, the number of limit definitions that follow, six fields each:
--   algorithm  1 LEAKY_BUCKET, 2 TOKEN_BUCKET, 3 FIXED_WINDOW, 4 SLIDING_WINDOW, 5 CONCURRENCY
--   p1         buckets: capacity;                     windows, CONCURRENCY: limit
--   p2         buckets: flowRate / refillRate per s;  windows: window in ms; CONCURRENCY: lease ms
--   mode       0 shape, 1 police (LEAKY_BUCKET only)
--   max_delay  ms, or -1 for none (LEAKY_BUCKET only)
--   dry_run    1: decided and reported, but never blocks the request
-- then one argument, the groups, packed, every number a 32-bit little-endian unsigned integer:
--   a request:    n (1 .. 2^30 - 1), its number of keys, then per key an entry;
--   a tentative request: 2^30 + n (n as above), then per key an entry: decided and charged as a
--                 request is, and replying two more fields per key (see GIVE-BACKS below);
--   settlements:  2^31 + n (0 .. 2^30 - 1), then n entries, each settling a reservation (see
--                 SETTLEMENTS below);
--   give-backs:   2^31 + 2^30 + n (0 .. 2^30 - 1), then n entries, each followed by a token
--                 (see GIVE-BACKS below);
-- an entry: the key's number in KEYS, then a word w whose low 30 bits are its limit's
-- definition number (1..L); when w has bit 31 set, an amount follows as two numbers (its low
-- and high 32 bits, at most 2^53), negative when w also has bit 30 set. A request's key costs
-- the amount (1 .. 2^53) or, without one, 1: the common cost of 1 costs no byte more. A
-- settlement's entry always carries its amount, the delta (actual - reserved); a give-back's
-- entry carries the amount charged (1 .. 2^53; without one, 1), then its token: t1 and t2, each
-- a signed 64-bit integer as two numbers (low and high 32 bits, two's complement, |t| <= 2^53).
-- Then the lease prefix, unique to this call: the i-th request of the batch (tentative ones
-- included; settlements and give-backs do not count) takes its CONCURRENCY slots under the
-- member <prefix><i>. (Packed rather than one argument per number, and with each key once: a
-- batch is mostly one client's burst on one key, and every argument costs Redis an object and a
-- Lua string, and the client its formatting.)
--
-- SETTLEMENTS (issue 15: cost-weighted limits). A request reserves its cost; once its real cost is
-- known, src/store/redis_store_charges.cpp sends the settlements of one event-loop turn in one call
-- (a call of settlement groups only). Each brings its key's state to now and adjusts it by the
-- delta, as src/limiter/*_settle do (operation for operation): TOKEN_BUCKET tokens -= delta and
-- LEAKY_BUCKET queue_size += delta after the refill/leak, FIXED_WINDOW count += delta in the window
-- current now, SLIDING_WINDOW the weight of the log's window (a charge logged at now, a refund
-- taken from the oldest entries); never below empty, a debt at most 2^53. A key without this
-- algorithm's state settles a fresh one (a refund then writes nothing), and one holding another
-- algorithm's state (a reload changed the limit while the request ran) is the new limit's and is
-- left as it is; CONCURRENCY ignores settlements. A bucket's settled state expires no sooner than its queue drains (the ttl or
-- longer), so that a debt is never forgotten before it is paid. Settlements reply nothing.
--
-- GIVE-BACKS (issue 16: all-or-none across Redis Cluster slots, docs/redis-cluster.md). A
-- request whose keys live on several slots is sent as one tentative request per slot; when one
-- part refuses, the parts that admitted are given back, each on its key's own primary and clock.
-- A tentative request's reply carries, per key, its give-back token (t1, t2): FIXED_WINDOW the
-- start of the window charged; SLIDING_WINDOW the running total of the entry logged and its
-- time (the member's number and score); a shaped LEAKY_BUCKET the level and the whole ms of the
-- time its charge left; zeros for the token bucket, a LEAKY_BUCKET meter, CONCURRENCY, and a key
-- the request did not charge (refused, or not the last of its request's limits on that key).
-- A give-back entry, with the amount charged and that token, undoes the charge:
--   TOKEN_BUCKET, LEAKY_BUCKET  the settlement of delta -amount: refill (leak) to now, then
--                   tokens += amount, at most capacity (queue_size -= amount, at least 0); a
--                   shaped LEAKY_BUCKET only while the key holds what its charge left (no request
--                   was held to a slot behind it since), and otherwise nothing
--   FIXED_WINDOW    count -= amount (at least 0) when the window current now starts at t1;
--                   otherwise nothing (the charge ended with its window)
--   SLIDING_WINDOW  when the log brought to now holds the member of total t1 at score t2 and t1
--                   is above the floor's base: the member goes and the totals of the entries
--                   after it are lowered by the amount (at their own times; at most by the
--                   entry's own weight), which leaves the log that never held the request;
--                   otherwise nothing (it left the window, a refund took it, or the log was
--                   cleared or renumbered)
--   CONCURRENCY     nothing here: the slot is given back as any slot is, by src/redis/slots.lua
--                   release of <prefix><i>, which announces it (this script knows no channel)
-- A key without the algorithm's state gives back nothing. Give-backs reply nothing.
--
-- Returns one string: per key of every request, in request order, six signed 64-bit
-- little-endian integers: allowed (0/1), remaining, reset_ms, retry_after_ms, delay_ms, level,
-- where level is the state's count after this request (queue_size, tokens, the window's count
-- or the log's weight) as it is stored if committed; a tentative request's keys have eight,
-- those six and then its token, t1 and t2. (One string rather than an array of integers: an
-- array costs the client an object per integer.)
--
-- Data layout, one Redis key per limit key (numbers are stored with %.17g, which round-trips a
-- double exactly and prints whole numbers without a fraction):
--   LEAKY_BUCKET    hash {queue_size, last_leak_time (ms, may be fractional)}, PEXPIRE ttl
--   TOKEN_BUCKET    hash {tokens, last_refill_time (ms, may be fractional)}, PEXPIRE ttl
--                   (the time's whole ms and its fraction are kept apart in the script, as
--                   limiter::split_ms in C++, and written as one decimal that reads back as
--                   both exactly: see format_split)
--   FIXED_WINDOW    hash {count, window_start (ms, a multiple of the window)}, expiring one
--                   window after the window's end (PEXPIRE of the time left in it plus the
--                   window, relative to the script's now; see WINDOW_GRACE)
--   CONCURRENCY     sorted set of the slots taken, scored by when each lease lapses (ms), members
--                   the lease ids; renewed (src/redis/slots.lua) while the request runs, removed
--                   when it ends; PEXPIRE one lease after the newest slot taken
--   SLIDING_WINDOW  sorted set of the admissions (and settled charges) in the window, scored
--                   by time (ms), members the log's running total after each, zero-padded to 16
--                   digits (unique: totals only grow); plus the floor at score -inf,
--                   "=<base>:<clock>" (see SLIDING_WINDOW below); PEXPIRE until one window after
--                   the newest leaves the window
-- The windows' keys outlive their window by one window length (WINDOW_GRACE): a state past
-- its window counts as none, so the longer life changes no decision, and it keeps the state
-- when the script's clock is not Redis's (an explicit test time stands still while Redis expires
-- keys in real time: a key set to expire 1 ms after a frozen now would vanish between two
-- requests of one test instant).
-- A key holding another algorithm's state (the limit changed on reload) counts as no state, as
-- in the C++ (src/limiter/algorithm.cpp); writing the new state deletes the old one first.
--
-- Per request, phase 1 decides every key without writing. Phase 2 runs only when every enforced
-- (not dry-run) limit admits, and then writes every key: either the request is charged on all
-- its limits or on none. A rejected request writes nothing, which also keeps rejections cheap.
-- Phase 2 writes whole states (the count decided in phase 1 rather than HINCRBY), and only the
-- last of several limits of one request sharing one key: the memory store commits exactly so,
-- and a second increment would charge such a key twice. The hash states (buckets and fixed
-- windows) are read once per call and written once, at its end (see `hash_state`); the sliding
-- window's sorted set is written at once.
--
-- The arithmetic is the C++ one (src/limiter/*.cpp) operation for operation, in doubles, with
-- the same epsilons, so both stores decide alike to the bit; keep them in step.

-- The standard library's functions used most, as locals. Set by decide_batch on every call: a
-- Function library's top level runs where Redis 7.0 offers no standard library, only `redis`.
local floor, ceil, max
local LEAKY_BUCKET, TOKEN_BUCKET, FIXED_WINDOW, SLIDING_WINDOW, CONCURRENCY = 1, 2, 3, 4, 5
local SHAPE = 0
local GROUP = 6
-- src/limiter/cost.hpp: amounts stay within 2^53, where doubles hold every integer exactly.
local MAX_AMOUNT = 9007199254740992
local AMOUNT_FOLLOWS, NEGATIVE = 2147483648, 1073741824
-- The groups' count words: a request's is its number of keys.
local TENTATIVE, SETTLEMENTS, GIVE_BACKS = 1073741824, 2147483648, 3221225472
-- How many window lengths a window's key outlives its window (see the data layout above).
local WINDOW_GRACE = 1

-- src/limiter/leaky_bucket.cpp: sums of slots that are not whole ms land a hair off whole
-- values; both roundings of the buckets tolerate that much, the leak a few units in the last
-- place where the times are coarser than that.
local MS_EPSILON = 1e-6
local RELATIVE_EPSILON = 1e-15

local function format_number(x)
  -- %.17g goes through the C library's slow exact printing: whole values (most stored times,
  -- every count) take the short way, which prints the same digits.
  if x == floor(x) and x > -1e15 and x < 1e15 then
    return string.format('%d', x)
  end
  return string.format('%.17g', x)
end

-- A time of the buckets, its whole ms `whole` and its fraction `fraction` (in [0, 1)), as one
-- decimal: the whole, then the fraction's digits, as many as read back as the same double (17
-- significant ones; Lua's format takes at most 99 after the point, so a fraction below 1e-82 ms
-- reads back a hair off, which no decision can see). Every other stored number is format_number's.
local function format_split(whole, fraction)
  if fraction == 0 or whole < 0 or whole >= 1e15 then
    return format_number(whole + fraction) -- whole; or no time a clock gives
  end
  local digits, scaled = 17, fraction
  while scaled < 0.1 and digits < 99 do
    scaled = scaled * 10
    digits = digits + 1
  end
  -- "0.571..." without its "0"; never "1.000...": the largest double below 1 prints 0.99...989.
  local decimals = string.format('%.' .. digits .. 'f', fraction)
  return string.format('%d', whole) .. string.sub(decimals, 2)
end

-- A stored number, or nil when it is none or beyond what sluice writes (an amount or a debt
-- within 2^53 either way, a time in unix ms): Lua 5.1's tonumber also reads "nan", "inf", hex
-- and 1e300, and such a value would pass every comparison below into the reply, where packing it
-- as an int64 is undefined in C. Such state is not ours: the key is taken as holding none, as a
-- key of another type is.
local function stored_number(text)
  local number = tonumber(text)
  if number == nil or number ~= number or number > MAX_AMOUNT or number < -MAX_AMOUNT then
    return nil
  end
  return number
end

-- A stored time as its whole ms and fraction: format_split's decimal, or any number an earlier
-- sluice wrote (a time with a fraction was one double then: split at its point).
local function parse_split(text)
  local number = stored_number(text)
  if number == nil then
    return nil, nil
  end
  local dot = string.find(text, '.', 1, true)
  if dot ~= nil and number >= 0 and not string.find(text, '[eE]') then
    local whole = tonumber(string.sub(text, 1, dot - 1))
    local fraction = tonumber('0' .. string.sub(text, dot))
    if whole ~= nil and fraction ~= nil then
      return whole, fraction
    end
  end
  local whole = floor(number)
  return whole, number - whole
end

-- The buckets' ceil_ms: std::ceil(std::max(0.0, ms - ms_epsilon)).
local function ceil_bucket_ms(ms)
  local x = ms - MS_EPSILON
  if x > 0 then
    return ceil(x)
  end
  return 0
end

-- The sliding window's ceil_ms: std::ceil(std::max(0.0, ms)).
local function ceil_ms(ms)
  if ms > 0 then
    return ceil(ms)
  end
  return 0
end

-- Two numeric fields of a hash, the second a time (its whole ms and fraction), or nil when the
-- key holds no such state (absent, another algorithm's hash, or another type altogether: pcall
-- turns WRONGTYPE into a value).
local function read_hash(key, field1, field2)
  local stored = redis.pcall('HMGET', key, field1, field2)
  if stored.err or not stored[1] or not stored[2] then
    return nil
  end
  local a = stored_number(stored[1])
  local b, b_fraction = parse_split(stored[2])
  if a == nil or b == nil then
    return nil
  end
  return a, b, b_fraction
end

-- Whether `key`, which holds no state of the algorithm reading it, holds another algorithm's: a
-- settlement then leaves it alone (see SETTLEMENTS), as src/limiter/algorithm.cpp's settle.
local function another_state(key)
  return redis.call('EXISTS', key) == 1
end

-- The hash states (buckets, fixed windows) this call reads and writes, kept here and written to
-- Redis once, at the end: the requests of a batch that share a key (one client's burst) cost
-- one HMGET, one HSET and one PEXPIRE together, and decide exactly as if each had read what the
-- one before it wrote (stored numbers round-trip exactly: see format_number).
-- Per call, as are lease_prefix, request_number and out below: decide_batch sets them afresh.
local cached      -- key -> {algorithm, f1, f2, a, b, b_fraction, replace, dirty, expire}
-- 1e15 ms, 31,700 years: a key idle that long is gone for any purpose, and the value is an exact
-- integer that every Redis reads as one.
local MAX_EXPIRE_MS = 1e15
local cached_keys -- in order of first use, so that the writes are deterministic

local function write_out(key, c)
  if c.dirty then
    c.dirty = false
    if c.replace then
      redis.call('DEL', key) -- absent, or another algorithm's state
    end
    redis.call('HSET', key, c.f1, string.format('%d', c.a),
               c.f2, format_split(c.b, c.b_fraction))
    -- Bounded: a debt of 2^53 at a slow rate drains in more milliseconds than Redis takes
    -- (past 1e17 or 9.2e18, by version), and a refused PEXPIRE would fail the whole call.
    redis.call('PEXPIRE', key, string.format('%d', math.min(c.expire, MAX_EXPIRE_MS)))
  end
end

-- The state of `key` for `algorithm` in fields f1 and f2 (a and b are nil when there is none).
local function hash_state(key, algorithm, f1, f2)
  local c = cached[key]
  if c == nil then
    cached_keys[#cached_keys + 1] = key
  elseif c.algorithm == algorithm then
    return c
  else
    write_out(key, c) -- a reload changed the limit mid-batch: the new one starts from Redis
  end
  local a, b, b_fraction = read_hash(key, f1, f2)
  c = { algorithm = algorithm, f1 = f1, f2 = f2, a = a, b = b, b_fraction = b_fraction,
        replace = a == nil, dirty = false, expire = 0 }
  cached[key] = c
  return c
end

-- Records a hash state to write at the end; `b_fraction` is the fraction of the time b (a
-- bucket's), nil for a whole one.
local function store_state(c, a, b, expire, b_fraction)
  c.a, c.b, c.b_fraction, c.dirty, c.expire = a, b, b_fraction or 0, true, expire
end

-- Writes out and forgets a key's cached state, before something else uses the key directly.
local function release(key)
  local c = cached[key]
  if c ~= nil then
    write_out(key, c)
    cached[key] = nil
  end
end

---------------------------------------------------------------------------------------------------
-- The algorithms. Each has
--   decide(key, p, now) -> allowed, remaining, reset, retry_after, delay, level, w1, w2, w3
--     the decision (the reply's six fields) and what `write` needs (w1, w2, w3), without writing;
--   write(key, p, ttl, now, allowed, reset, level, w1, w2, w3)
--     which charges the request;
-- and, where the algorithm has them,
--   settle(key, p, ttl, now, delta)                  a settlement (see SETTLEMENTS);
--   token(w1, w2, p) -> t1, t2                       the give-back token of a charge written;
--   give_back(key, p, ttl, now, amount, t1, t2)     a give-back (see GIVE-BACKS).
-- Plain values rather than a table per decision: a table per request was a measurable part of
-- the script's time.

-- The buckets: leak_and_admit of src/limiter/leaky_bucket.cpp. A token bucket is a leaky bucket
-- that never delays, seen from the other side: tokens = capacity - queue_size. Returns allowed,
-- remaining, reset, retry_after, delay, the queue size after the request and last_leak_time,
-- its whole ms and fraction (limiter::split_ms: kept apart, so a sum of slots does not round at
-- the magnitude of a unix time).
-- Leaks whole slots; keeps the fraction of the slot in progress. A clock behind `last` leaks
-- nothing and never moves it back.
local function leak(q, whole, fraction, slot, now)
  local elapsed = (now - whole) - fraction
  if elapsed > 0 then
    local slots = elapsed / slot
    local leaked = floor(slots + max(MS_EPSILON / slot, RELATIVE_EPSILON * slots))
    if leaked >= q then
      q = 0
      whole = floor(now)
      fraction = now - whole
    elseif leaked > 0 then
      q = q - leaked
      local moved = fraction + leaked * slot
      local moved_whole = floor(moved)
      whole = whole + moved_whole
      fraction = moved - moved_whole
    end
  end
  return q, whole, fraction
end

local function leak_and_admit(q, whole, fraction, capacity, flow_rate, shaping, max_delay, now,
                              cost)
  local slot = 1000.0 / flow_rate
  if q == nil then
    whole = floor(now)
    q, fraction = 0, now - whole
  end
  q, whole, fraction = leak(q, whole, fraction, slot, now)
  local head = (whole - now) + fraction -- L - now

  -- The request's last slot would stand at position q + cost; the head leaves at L.
  local wait = head + (q + (cost - 1)) * slot
  -- The hold it gets: that wait, but for a clock behind L, which stands at L for it (hold_ms in
  -- leaky_bucket.cpp says why). Retries and the reset stay on the store's clock.
  local hold = wait
  if head > 0 then
    hold = wait - head
  end
  local has_room = q <= capacity - cost
  local wait_fits = (not shaping) or max_delay < 0 or hold <= max_delay + MS_EPSILON

  local allowed, retry_after, delay = 0, 0, 0
  if cost > capacity then
    -- Never fits: refused without a retry estimate (the store reports never_fits).
  elseif has_room and wait_fits then
    q = q + cost
    allowed = 1
    if shaping then
      delay = ceil_bucket_ms(hold)
    end
  else
    -- Full: the cost fits once q + cost - capacity more slots have leaked. Too long a wait: it
    -- shrinks one ms per ms, so with max_delay a full bucket's retry waits for the later of the
    -- two.
    local until_ms
    if has_room then
      until_ms = wait - max_delay
    else
      until_ms = head + (q - (capacity - cost)) * slot
      if shaping and max_delay >= 0 then
        until_ms = max(until_ms, wait - max_delay)
      end
    end
    retry_after = max(ceil_bucket_ms(until_ms), 1)
  end
  local remaining = capacity - q
  if remaining < 0 then
    remaining = 0 -- a debt
  end
  return allowed, remaining, ceil_bucket_ms(head + q * slot), retry_after, delay, q, whole,
    fraction
end

-- src/limiter/cost.hpp's settle_level: level + delta within [0, MAX_AMOUNT], no intermediate
-- value outside [-2^53, 2^53].
local function settle_level(level, delta)
  if delta > MAX_AMOUNT - level then
    return MAX_AMOUNT
  end
  local settled = level + delta
  if settled < 0 then
    return 0
  end
  return settled
end

-- leak_and_settle of src/limiter/leaky_bucket.cpp: the queue and its last leak (whole ms and
-- fraction) after the settlement, and the ms until it has drained.
local function leak_and_settle(q, whole, fraction, flow_rate, now, delta)
  local slot = 1000.0 / flow_rate
  if q == nil then
    whole = floor(now)
    q, fraction = 0, now - whole
  end
  q, whole, fraction = leak(q, whole, fraction, slot, now)
  q = settle_level(q, delta)
  return q, whole, fraction, ceil_bucket_ms(((whole - now) + fraction) + q * slot)
end

-- Both buckets keep {count, time} in their hash state, for the ttl.
local function write_bucket(_, _, ttl, _, _, _, level, state, whole, fraction)
  store_state(state, level, whole, ttl, fraction)
end

-- A bucket's give-back is the settlement of -amount: refilling t - c then adding c back equals
-- refilling t, the cap included.
local function bucket_give_back(bucket)
  return function(key, p, ttl, now, amount)
    bucket.settle(key, p, ttl, now, -amount)
  end
end

local leaky_bucket = { write = write_bucket }

function leaky_bucket.decide(key, p, now, cost)
  local c = hash_state(key, LEAKY_BUCKET, 'queue_size', 'last_leak_time')
  local allowed, remaining, reset, retry_after, delay, q, whole, fraction =
    leak_and_admit(c.a, c.b, c.b_fraction, p.p1, p.p2, p.mode == SHAPE, p.max_delay, now, cost)
  return allowed, remaining, reset, retry_after, delay, q, c, whole, fraction
end

function leaky_bucket.settle(key, p, ttl, now, delta)
  local c = hash_state(key, LEAKY_BUCKET, 'queue_size', 'last_leak_time')
  if c.a == nil and (delta < 0 or another_state(key)) then
    return -- a refund on an empty queue gives back nothing
  end
  local q, whole, fraction, drained = leak_and_settle(c.a, c.b, c.b_fraction, p.p2, now, delta)
  store_state(c, q, whole, max(ttl, drained), fraction)
end

-- A shaped queue is a timeline of slots promised to held requests: a request admitted after the
-- charge was held to a slot behind it, and taking the charge back would hold the next request to
-- that same slot (two at once upstream). Its token is the level and the whole ms of the time the
-- charge left, and its give-back takes it back only while the key still holds exactly those (no
-- request was admitted after it, nothing settled); otherwise its slots pass unused. (At a
-- flowRate above 1000/s a later request could leave both as they were; slots are then less than
-- a ms apart anyway.) A meter's give-back is unconditional: token (0, 0).
function leaky_bucket.token(c, whole, p)
  if p.mode == SHAPE then
    return c.a, whole
  end
  return 0, 0
end

function leaky_bucket.give_back(key, p, ttl, now, amount, level, whole)
  if level ~= 0 then
    local c = hash_state(key, LEAKY_BUCKET, 'queue_size', 'last_leak_time')
    if c.a ~= level or c.b ~= whole then
      return
    end
  end
  leaky_bucket.settle(key, p, ttl, now, -amount)
end

local token_bucket = { write = write_bucket }

function token_bucket.decide(key, p, now, cost)
  local c = hash_state(key, TOKEN_BUCKET, 'tokens', 'last_refill_time')
  local q = nil
  if c.a ~= nil then
    q = p.p1 - c.a
  end
  local allowed, remaining, reset, retry_after, delay, level, whole, fraction =
    leak_and_admit(q, c.b, c.b_fraction, p.p1, p.p2, false, -1, now, cost)
  return allowed, remaining, reset, retry_after, delay, p.p1 - level, c, whole, fraction
end

function token_bucket.settle(key, p, ttl, now, delta)
  local c = hash_state(key, TOKEN_BUCKET, 'tokens', 'last_refill_time')
  if c.a == nil and (delta < 0 or another_state(key)) then
    return -- a refund on a full bucket gives back nothing
  end
  local q = nil
  if c.a ~= nil then
    q = p.p1 - c.a -- a debt: tokens below zero, a queue above capacity
  end
  local level, whole, fraction, full = leak_and_settle(q, c.b, c.b_fraction, p.p2, now, delta)
  store_state(c, p.p1 - level, whole, max(ttl, full), fraction)
end

token_bucket.give_back = bucket_give_back(token_bucket)

---------------------------------------------------------------------------------------------------
-- FIXED_WINDOW: src/limiter/fixed_window.cpp. Windows are aligned to multiples of the window
-- since the epoch; a clock that stepped back stays in the stored window (a window never
-- reopens), and a stored window that is over counts from zero.

local fixed_window = {}

-- The count of the window current at `now`, its start and the ms until it ends.
local function current_window(c, window, now)
  local start = floor(now / window) * window
  if c.a ~= nil and c.b > start then
    start = c.b
  end
  local count = c.a
  if count == nil or c.b ~= start then
    count = 0
  end
  return count, start, ceil(start + window - now)
end

function fixed_window.decide(key, p, now, cost)
  local limit = p.p1
  local c = hash_state(key, FIXED_WINDOW, 'count', 'window_start')
  local count, start, until_end = current_window(c, p.p2, now)
  local allowed, retry_after = 0, 0
  if cost > limit then
    -- Never fits, not even in an empty window: refused without a retry estimate.
  elseif count <= limit - cost then
    count = count + cost
    allowed = 1
  else
    retry_after = max(until_end, 1)
  end
  local remaining = limit - count
  if remaining < 0 then
    remaining = 0 -- a debt
  end
  return allowed, remaining, until_end, retry_after, 0, count, c, start
end

function fixed_window.settle(key, p, _, now, delta)
  local c = hash_state(key, FIXED_WINDOW, 'count', 'window_start')
  if c.a == nil and (delta < 0 or another_state(key)) then
    return -- a refund on an empty window gives back nothing
  end
  -- A settlement after its request's window ended adjusts the current window.
  local count, start, until_end = current_window(c, p.p2, now)
  store_state(c, settle_level(count, delta), start, until_end + WINDOW_GRACE * p.p2)
end

function fixed_window.write(_, p, _, _, allowed, reset, level, state, start)
  -- A rejection leaves the current window's count as it was (a fresh count cannot reject).
  if allowed == 1 then
    store_state(state, level, start, reset + WINDOW_GRACE * p.p2)
  end
end

function fixed_window.token(_, start)
  return start, 0
end

function fixed_window.give_back(key, p, _, now, amount, start)
  local c = hash_state(key, FIXED_WINDOW, 'count', 'window_start')
  if c.a == nil then
    return -- no window at all: nothing to give back
  end
  local count, current, until_end = current_window(c, p.p2, now)
  if current ~= start or c.b ~= start then
    return -- the charge ended with its window
  end
  store_state(c, settle_level(count, -amount), start, until_end + WINDOW_GRACE * p.p2)
end

---------------------------------------------------------------------------------------------------
-- SLIDING_WINDOW: src/limiter/sliding_window.cpp, an exact log of the weight admitted in the
-- window (at - window, at], where `at` is the log's clock: now or, when the clock stepped back,
-- the newest reading the log was brought to (it never goes back). An entry is a member holding the
-- log's running total after it, scored by its time; the floor, a member scored -inf (always rank
-- 0), "=<base>:<clock>", holds the total that no longer counts (left the window, or given back by
-- a refund, which takes from the oldest entries first) and the clock. The weight in the window is
-- the newest total minus base: three lookups of O(log n), whatever the costs. Totals are
-- zero-padded to 16 digits (2^53 has 16), so that the members of one time sort as their numbers.
-- Reading changes nothing: what left the window is removed when writing, as the C++ erases it
-- only from the state it commits (with a clock that steps back, removing it on a rejection would
-- change later decisions).

local sliding_window = {}

local function total_member(total)
  return string.format('%016d', total)
end

-- The key's log brought to `now`, read without writing: {fresh, floor (the member to replace),
-- base, top (the newest total, base when none weighs), newest_at, at, edge (at - window), trim
-- (entries left the window), clear (the log weighs nothing: its totals start from 0 again)}.
-- No floor (absent, another algorithm's sorted set, another type) is no state, and so is an entry
-- read here that is not a number sluice writes (stored_number): a log it rewrites afresh.
local function fresh_log(window, now)
  return { fresh = true, base = 0, top = 0, at = now, edge = now - window, trim = false,
           clear = false }
end

local function sliding_read(key, window, now)
  local head = redis.pcall('ZRANGE', key, 0, 1, 'WITHSCORES')
  local base, clock
  if head.err == nil and head[1] ~= nil then
    base, clock = string.match(head[1], '^=(%d+):(.+)$')
  end
  if base == nil or stored_number(base) == nil or stored_number(clock) == nil then
    return fresh_log(window, now)
  end
  local s = { fresh = false, floor = head[1], base = stored_number(base),
              at = max(now, stored_number(clock)), trim = false, clear = false }
  s.edge = s.at - window
  local top = s.base
  if head[3] ~= nil then
    local oldest_at = stored_number(head[4])
    if oldest_at == nil then
      return fresh_log(window, now)
    end
    if oldest_at <= s.edge then
      -- What has left the window no longer counts: base rises to the newest such total.
      local left = redis.call('ZREVRANGEBYSCORE', key, format_number(s.edge), '(-inf', 'LIMIT', 0, 1)
      local total = stored_number(left[1])
      if total == nil then
        return fresh_log(window, now)
      end
      if total > s.base then
        s.base = total
      end
      s.trim = true
    end
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    top, s.newest_at = stored_number(newest[1]), stored_number(newest[2])
    if top == nil or s.newest_at == nil then
      return fresh_log(window, now)
    end
  end
  if top <= s.base then
    s.clear, s.base, top = true, 0, 0
  end
  s.top = top
  return s
end

-- The time of the first entry whose total reaches `target` (it exists: the newest's is top).
-- Totals grow with rank (rank 0 is the floor); entries that left the window but are not yet
-- removed total at most base, below any target. An entry between the two that sliding_read
-- checked and that is not a number of ours counts as reaching it: the sooner retry is the one a
-- client could be refused at again, never one that admits early. Its time is a score, ordered
-- between the two checked.
local function first_reaching(key, target)
  local lo, hi = 1, redis.call('ZCARD', key) - 1
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if (stored_number(redis.call('ZRANGE', key, mid, mid)[1]) or MAX_AMOUNT) >= target then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return tonumber(redis.call('ZRANGE', key, lo, lo, 'WITHSCORES')[2])
end

-- Until the log equals a fresh one: until the newest entry that weighs leaves the window, or,
-- when it weighs nothing, until now reaches the log's clock (ahead only after a step back).
local function until_reset(s, weight, logged, window, now)
  if weight <= 0 then
    return ceil_ms(s.at - now)
  end
  local newest = s.newest_at
  if logged then
    newest = s.at
  end
  return ceil_ms(newest + window - now)
end

-- Writes the log read as `s`: what left the window goes, `amount` (0, or 1 .. 2^53 with the
-- weight after it at most 2^53) is logged at the clock, and the floor records base and clock.
-- Totals stay within 2^53, where doubles are exact: when the next one would not, the log is
-- renumbered from base (entries that weigh nothing go), as the C++ does.
local function sliding_write(key, window, s, amount, reset)
  if s.fresh or s.clear then
    redis.call('DEL', key)
  else
    if s.trim then
      redis.call('ZREMRANGEBYSCORE', key, '(-inf', format_number(s.edge))
    end
    redis.call('ZREM', key, s.floor)
  end
  if amount > 0 then
    if s.top > MAX_AMOUNT - amount then
      local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
      for i = 1, #entries, 2 do
        local total = stored_number(entries[i])
        redis.call('ZREM', key, entries[i])
        if total ~= nil and total > s.base then
          redis.call('ZADD', key, entries[i + 1], total_member(total - s.base))
        end
      end
      s.top, s.base = s.top - s.base, 0
    end
    s.top = s.top + amount
    redis.call('ZADD', key, format_number(s.at), total_member(s.top))
  end
  redis.call('ZADD', key, '-inf', '=' .. format_number(s.base) .. ':' .. format_number(s.at))
  redis.call('PEXPIRE', key, reset + WINDOW_GRACE * window)
end

function sliding_window.decide(key, p, now, cost)
  release(key) -- a hash cached under this key (another algorithm's) goes to Redis first
  local limit, window = p.p1, p.p2
  local s = sliding_read(key, window, now)
  local weight = s.top - s.base
  local allowed, retry_after = 0, 0
  if cost > limit then
    -- Never fits, not even in an empty window: refused without a retry estimate.
  elseif weight <= limit - cost then
    allowed = 1
    weight = weight + cost
  else
    -- The cost fits once the entries up to the first whose total reaches top + cost - limit
    -- have left the window (a cost of 1 without a debt: the oldest that weighs).
    retry_after = max(ceil_ms(first_reaching(key, s.top + cost - limit) + window - now), 1)
  end
  local remaining = limit - weight
  if remaining < 0 then
    remaining = 0 -- a debt
  end
  local reset = until_reset(s, weight, allowed == 1, window, now)
  return allowed, remaining, reset, retry_after, 0, weight, s, allowed * cost
end

function sliding_window.write(key, p, _, _, _, reset, _, s, amount)
  sliding_write(key, p.p2, s, amount, reset)
end

-- The entry a charge logged: its total (the log's newest once written) and its time.
function sliding_window.token(s)
  return s.top, s.at
end

-- Removes the entry of total `total` logged at `at` and lowers the totals after it by its
-- weight, as if it had never been logged: O(k log n) for the k entries logged after it (a
-- give-back follows its charge by a round trip or two: k is that moment's traffic). Only an
-- entry that still weighs (above base once what left the window is out) is given back. The
-- floor and the expiry stay as the last write left them, which is what the log that never held
-- the entry has once a request came after the charge; when none did, the log's clock stays at
-- the charge's time, later than the other's, which only a reading from before it can tell.
function sliding_window.give_back(key, p, _, now, amount, total, at)
  release(key)
  local s = sliding_read(key, p.p2, now)
  if s.fresh or s.clear or total <= s.base then
    return
  end
  local member = total_member(total)
  local score = redis.call('ZSCORE', key, member)
  if not score or tonumber(score) ~= at then
    return -- not the entry charged: the log was cleared or renumbered since
  end
  local rank = redis.call('ZRANK', key, member)
  -- The entry's weight is its total less the one before it (rank 0 is the floor); the amount
  -- given back is at most that, so that the lowered totals stay above the earlier ones.
  local weight = total
  if rank > 1 then
    local before = stored_number(redis.call('ZRANGE', key, rank - 1, rank - 1)[1])
    if before == nil then
      return -- not a log of ours
    end
    weight = total - before
  end
  if amount < weight then
    weight = amount
  end
  local later = redis.call('ZRANGE', key, rank + 1, -1, 'WITHSCORES')
  for i = 1, #later, 2 do
    if stored_number(later[i]) == nil then
      return -- not a log of ours
    end
  end
  redis.call('ZREM', key, member)
  for i = 1, #later, 2 do
    redis.call('ZREM', key, later[i])
  end
  for i = 1, #later, 2 do
    redis.call('ZADD', key, later[i + 1], total_member(stored_number(later[i]) - weight))
  end
end

function sliding_window.settle(key, p, _, now, delta)
  release(key)
  local window = p.p2
  local s = sliding_read(key, window, now)
  if s.fresh and (delta < 0 or another_state(key)) then
    return -- a refund on an empty log gives back nothing
  end
  local weight = s.top - s.base
  local settled = settle_level(weight, delta)
  local amount = 0
  if settled > weight then
    amount = settled - weight -- a charge: its own entry, at the log's clock
  elseif settled == 0 then
    s.clear, s.base, s.top = true, 0, 0
  else
    s.base = s.top - settled -- a refund: the oldest entries weigh less
  end
  sliding_write(key, window, s, amount, until_reset(s, settled, amount > 0, window, now))
end

---------------------------------------------------------------------------------------------------
-- CONCURRENCY: src/limiter/concurrency.cpp. The slots taken are the leases that have not lapsed
-- (score > now): a slot whose instance died frees itself when its lease lapses. Reports the free
-- slots, no reset and no retry estimate; level is the slots taken after the request.

local concurrency = {}
local lease_prefix, request_number -- per call

function concurrency.decide(key, p, now)
  release(key) -- a hash cached under this key (another algorithm's) goes to Redis first
  local held = redis.pcall('ZCOUNT', key, '(' .. format_number(now), '+inf')
  local fresh = type(held) ~= 'number' -- another type under the key: no state
  if fresh then
    held = 0
  end
  local allowed = 0
  if held < p.p1 then
    allowed = 1
    held = held + 1
  end
  -- More held than the limit allows (it was lowered by a reload, or another instance's
  -- configuration differs): no slot free, as the memory store says, never a negative count.
  local remaining = p.p1 - held
  if remaining < 0 then
    remaining = 0
  end
  return allowed, remaining, 0, 0, 0, held, lease_prefix .. request_number, fresh
end

function concurrency.write(key, p, _, now, allowed, _, _, member, fresh)
  if fresh then
    redis.call('DEL', key)
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', format_number(now))
  if allowed == 1 then
    redis.call('ZADD', key, format_number(now + p.p2), member)
    -- Only ever lengthened, as a renewal does (slots.lua): a shorter lease (a reload lowered
    -- it) must not expire the set under other requests' longer leases that have not lapsed.
    if redis.call('PTTL', key) < p.p2 then
      redis.call('PEXPIRE', key, p.p2)
    end
  end
end

---------------------------------------------------------------------------------------------------

local algorithms = {
  [LEAKY_BUCKET] = leaky_bucket,
  [TOKEN_BUCKET] = token_bucket,
  [FIXED_WINDOW] = fixed_window,
  [SLIDING_WINDOW] = sliding_window,
  [CONCURRENCY] = concurrency,
}

-- The reply: six packed integers per key (see the top), eight for a tentative request's, a
-- string per key, joined at the end.
local pack, byte -- struct.pack, string.byte: see floor above
local REPLY_FORMAT = '<i8i8i8i8i8i8'
-- The largest double below 2^63. A reset or retry-after past it (q slots of T ms: a settled debt
-- of 2^53 at 0.5/s is 1.8e19 ms) is packed as it, where struct.pack's conversion would wrap to
-- a negative; src/store/limits_call.hpp reads it back as the int64 maximum, which is what the
-- memory store's saturating conversion gives.
local I8_CEILING = 9223372036854774784
local function saturated(ms)
  if ms > I8_CEILING then
    return I8_CEILING
  end
  return ms
end
local TENTATIVE_FORMAT = '<i8i8i8i8i8i8i8i8'
local out, out_n -- per call

local function fail(message)
  return redis.error_reply('ERR sluice: ' .. message)
end

-- One call: KEYS and ARGV as the header says, the reply too. As an EVAL script, the file ends by
-- calling it; as a Redis Function, the library that src/redis/embed_lua.cmake makes of this file
-- registers it instead, so that everything above is built once per library load rather than on
-- every call (bench/run: one call of one request cost Redis 13.2 us as FCALL, 19.1 as EVALSHA).
local function decide_batch(KEYS, ARGV)
  floor, ceil, max, pack, byte = math.floor, math.ceil, math.max, struct.pack, string.byte
  cached, cached_keys = {}, {}
  lease_prefix, request_number = '', 0
  out, out_n = {}, 0

  -- The limit definitions.
  local definitions = {}
  local count = tonumber(ARGV[3])
  if count == nil or #ARGV < 3 + GROUP * count then
    return fail('expected ' .. tostring(ARGV[3]) .. ' limit definitions')
  end
  for d = 1, count do
    local base = 3 + GROUP * (d - 1)
    local p = {
      algorithm = algorithms[tonumber(ARGV[base + 1])],
      p1 = tonumber(ARGV[base + 2]),
      p2 = tonumber(ARGV[base + 3]),
      mode = tonumber(ARGV[base + 4]),
      max_delay = tonumber(ARGV[base + 5]),
      dry_run = ARGV[base + 6] == '1',
    }
    if p.algorithm == nil then
      return fail('unknown algorithm ' .. tostring(ARGV[base + 1]))
    end
    if p.p1 == nil or p.p2 == nil or p.p2 <= 0 or p.max_delay == nil then
      return fail('bad parameters for limit definition ' .. d)
    end
    definitions[d] = p
  end

  local now
  if ARGV[1] == '' then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
  else
    now = floor(tonumber(ARGV[1]))
  end
  local ttl = tonumber(ARGV[2])

  -- The packed requests.
  local requests = ARGV[4 + GROUP * count]
  if requests == nil or #ARGV ~= 5 + GROUP * count or #requests == 0 or #requests % 4 ~= 0 then
    return fail('expected the packed requests and the lease prefix after ' .. count ..
                ' limit definitions')
  end
  lease_prefix = ARGV[5 + GROUP * count]
  local function number_at(p)
    local b1, b2, b3, b4 = byte(requests, p, p + 3)
    return b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
  end
  local size = #requests

  -- The signed 64-bit number at `p` (low then high 32 bits, two's complement), exact within 2^53.
  local function signed_at(p)
    local low, high = number_at(p), number_at(p + 4)
    if high < NEGATIVE * 2 then
      return low + high * 4294967296
    end
    return -((4294967295 - high) * 4294967296 + (4294967296 - low))
  end

  -- The entry at `p` in the packed groups: its key, its limit's definition, its amount (1 when
  -- none is given) and where the next entry starts; nil when malformed.
  local function entry_at(p)
    if p + 7 > size then
      return nil
    end
    local key, word = KEYS[number_at(p)], number_at(p + 4)
    local amount, negative, next_p = 1, false, p + 8
    if word >= AMOUNT_FOLLOWS then
      word = word - AMOUNT_FOLLOWS
      if word >= NEGATIVE then
        word = word - NEGATIVE
        negative = true
      end
      if p + 15 > size then
        return nil
      end
      amount = number_at(p + 8) + number_at(p + 12) * 4294967296
      next_p = p + 16
    end
    local definition = definitions[word]
    if key == nil or definition == nil or amount > MAX_AMOUNT then
      return nil
    end
    if negative then
      amount = -amount
    end
    return key, definition, amount, next_p
  end

  -- The reply of one key of a tentative request: its decision and the token of what it charged
  -- (`charged`: written, and admitted), or zeros.
  local function tentative_reply(charged, d, r1, r2, r3, r4, r5, r6, w1, w2)
    local t1, t2 = 0, 0
    if charged and r1 == 1 and d.algorithm.token ~= nil then
      t1, t2 = d.algorithm.token(w1, w2, d)
    end
    return pack(TENTATIVE_FORMAT, r1, r2, saturated(r3), saturated(r4), r5, r6, t1, t2)
  end

  local p = 1
  while p <= size do
    local n = number_at(p)
    p = p + 4
    local tentative = n >= TENTATIVE and n < SETTLEMENTS
    if tentative then
      n = n - TENTATIVE
    end
    if n >= GIVE_BACKS then
      -- Give-backs: each on its own, in order, replying nothing.
      for _ = 1, n - GIVE_BACKS do
        local key, d, amount, next_p = entry_at(p)
        if key == nil or amount < 1 or next_p + 15 > size then
          return fail('bad give-back at byte ' .. p)
        end
        local t1, t2 = signed_at(next_p), signed_at(next_p + 8)
        if d.algorithm.give_back ~= nil then
          d.algorithm.give_back(key, d, ttl, now, amount, t1, t2)
        end
        p = next_p + 16
      end
    elseif n >= SETTLEMENTS then
      -- Settlements: each on its own, in order, replying nothing.
      for _ = 1, n - SETTLEMENTS do
        local key, d, delta, next_p = entry_at(p)
        if key == nil then
          return fail('bad settlement at byte ' .. p)
        end
        if d.algorithm.settle ~= nil and delta ~= 0 then
          d.algorithm.settle(key, d, ttl, now, delta)
        end
        p = next_p
      end
    elseif n < 1 then
      return fail('bad request group at byte ' .. (p - 4))
    elseif n == 1 then
      -- The common case, without phase 1's bookkeeping.
      request_number = request_number + 1
      local key, d, cost, next_p = entry_at(p)
      if key == nil or cost < 1 then
        return fail('bad key, limit number or cost at byte ' .. p)
      end
      p = next_p
      local algorithm = d.algorithm
      local allowed, remaining, reset, retry_after, delay, level, w1, w2, w3 =
        algorithm.decide(key, d, now, cost)
      if allowed == 1 or d.dry_run then
        algorithm.write(key, d, ttl, now, allowed, reset, level, w1, w2, w3)
      end
      out_n = out_n + 1
      if tentative then
        out[out_n] = tentative_reply(true, d, allowed, remaining, reset, retry_after, delay,
                                     level, w1, w2)
      else
        out[out_n] = pack(REPLY_FORMAT, allowed, remaining, saturated(reset),
                          saturated(retry_after), delay, level)
      end
    else
      request_number = request_number + 1
      -- Phase 1: decide every key of the request, write nothing. decided[i] holds the nine
      -- values of `decide`.
      local decided, last_of, limits, keys = {}, {}, {}, {}
      local admit = true
      for i = 1, n do
        local key, d, cost, next_p = entry_at(p)
        if key == nil or cost < 1 then
          return fail('bad key, limit number or cost at byte ' .. p)
        end
        p = next_p
        local r = { d.algorithm.decide(key, d, now, cost) }
        decided[i], limits[i], keys[i] = r, d, key
        last_of[key] = i
        if r[1] == 0 and not d.dry_run then
          admit = false
        end
      end
      -- Phase 2: charge every limit, or none.
      if admit then
        for i = 1, n do
          local key = keys[i]
          if last_of[key] == i then
            local r = decided[i]
            limits[i].algorithm.write(key, limits[i], ttl, now, r[1], r[3], r[6], r[7], r[8],
                                      r[9])
          end
        end
      end
      for i = 1, n do
        local r = decided[i]
        out_n = out_n + 1
        if tentative then
          out[out_n] = tentative_reply(admit and last_of[keys[i]] == i, limits[i], r[1], r[2],
                                       r[3], r[4], r[5], r[6], r[7], r[8])
        else
          out[out_n] = pack(REPLY_FORMAT, r[1], r[2], saturated(r[3]), saturated(r[4]), r[5],
                            r[6])
        end
      end
    end
  end
  for _, key in ipairs(cached_keys) do
    local c = cached[key]
    if c ~= nil then
      write_out(key, c)
    end
  end
  return table.concat(out)
end

return decide_batch(KEYS, ARGV)
