-- One node's sync of some global buckets, all in one hash slot.
--
-- KEYS[i]    the hash of one global bucket:
--              t        tokens (may be negative: debt)
--              u        time of the last refill, seconds (Redis clock)
--              x        time the key's expiry was last pushed back, seconds
--              n<node>  "<demand EWMA> <time of that node's last report> <its demand rate then>"
--                       (rates in requests/s)
-- ARGV[1]    this node's id
-- ARGV[2]    sync interval, seconds
-- ARGV[3]    key TTL, milliseconds
-- ARGV[5i-1..5i+3]  for KEYS[i]: rate (tokens/s), burst, admitted, demand,
--                   and the node's current demand rate (-1: unknown)
--
-- Returns {weight_1, tokens_1, weight_2, tokens_2, ...} as strings: Redis
-- would truncate Lua numbers to integers.
--
-- The maths is in the package documentation (redissync.go).

local me = 'n' .. ARGV[1]
local interval = tonumber(ARGV[2])
local ttl = ARGV[3]
-- Pushing the expiry back is a good part of a report's cost, so it is done
-- at most every tenth of the TTL: a bucket expires 0.9 to 1 TTL after its
-- last report.
local refresh = tonumber(ttl) / 1000 / 10
local tau = interval / 8   -- EWMA time constant
local stale = 5 * interval -- a node silent for longer is dropped
local min_demand = 1e-3    -- every live node claims at least this, requests/s

local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1e6

-- Numbers are stored and returned as '%.17g' strings, which round-trip
-- exactly. Formatting is a good part of the script's time, so each number
-- is formatted once.
local fmt = string.format
local now_s = fmt('%.17g', now)

local out = {}
for i = 1, #KEYS do
	local key = KEYS[i]
	local a = 5 * i - 1
	local rate = tonumber(ARGV[a])
	local burst = tonumber(ARGV[a + 1])
	local admitted = tonumber(ARGV[a + 2])
	local demand = tonumber(ARGV[a + 3])
	local current = tonumber(ARGV[a + 4])

	local tokens, last, expiry = burst, now, nil
	local mine, mine_at
	local sum = 0
	local dead
	local h = redis.call('HGETALL', key)
	for j = 1, #h, 2 do
		local f, v = h[j], h[j + 1]
		if f == 't' then
			tokens = tonumber(v) or burst
		elseif f == 'u' then
			last = tonumber(v) or now
		elseif f == 'x' then
			expiry = tonumber(v)
		else
			local e, at, r = string.match(v, '^(%S+) (%S+) (%S+)$')
			e, at, r = tonumber(e), tonumber(at), tonumber(r)
			if e == nil or at == nil or r == nil or now - at > stale then
				-- Silent too long (or unreadable): forget it. This node's own
				-- stale entry is dropped too and it starts afresh below.
				dead = dead or {}
				dead[#dead + 1] = f
			elseif f == me then
				mine, mine_at = e, at
			else
				-- The other node's average as of now: it has kept moving
				-- towards the rate that node last reported.
				local d = math.max(now - at, 0)
				sum = sum + math.max(r + (e - r) * math.exp(-d / tau), min_demand)
			end
		end
	end

	-- The global bucket: refill by the time since anyone last reported,
	-- then take what this node admitted. Debt is bounded by one burst.
	local elapsed = now - last
	if elapsed > 0 then
		tokens = tokens + rate * elapsed
	end
	tokens = math.min(tokens, burst) - admitted
	if tokens < -burst then
		tokens = -burst
	end

	-- This node's demand rate, smoothed with time constant tau over the
	-- real time between its reports (which need not be regular).
	local e, inst
	if mine == nil then
		inst = demand / interval
		if current >= 0 then
			inst = current
		end
		e = inst
	else
		local dt = math.max(now - mine_at, 1e-3)
		local alpha = 1 - math.exp(-dt / tau)
		inst = demand / dt
		if current >= 0 then
			inst = current
		end
		e = mine + alpha * (inst - mine)
	end
	-- The weight sets this node's own demand, as it is now, against the
	-- others' smoothed demand: a node whose traffic jumps gets its share at
	-- this report, not after the average catches up. The others see it
	-- through the average.
	local others = sum
	local own = math.max(inst, min_demand)
	local weight = own / (own + others)

	if dead then
		redis.call('HDEL', key, unpack(dead))
	end
	local tokens_s = fmt('%.17g', tokens)
	local node_s = fmt('%.17g %s %.17g', e, now_s, inst)
	if expiry == nil or now - expiry >= refresh or now < expiry then
		redis.call('HSET', key, 't', tokens_s, 'u', now_s, me, node_s, 'x', now_s)
		redis.call('PEXPIRE', key, ttl)
	else
		redis.call('HSET', key, 't', tokens_s, 'u', now_s, me, node_s)
	end
	out[3 * i - 2] = fmt('%.17g', weight)
	out[3 * i - 1] = tokens_s
	out[3 * i] = fmt('%.17g', others)
end
return out
