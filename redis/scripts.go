package redis

import goredis "github.com/redis/go-redis/v9"

// Every change of the trigger is one Lua script, so that Redis runs it as a
// whole, alone: no other client sees a member half moved, and a process that
// dies between two commands leaves nothing half done.
//
// Scores are unix milliseconds. The Go side rounds them (due times up, now
// down) and passes them, and every absolute time, as decimal strings, which
// the scripts hand to Redis as they are: no time passes through a Lua
// number, so none is reformatted.
//
// Keys, by role: due (ZSET member -> due ms), processing (ZSET member ->
// lease expiry ms), attempts (HASH member -> failed attempts), notify (ZSET
// member -> when it gave up, kept NotifyKept), seeded (string marker),
// seeding:<token> (a seed under way, one key per seed). A member is an order's id in a few
// bytes (member.go), or, written by an earlier version, its order number;
// the scripts treat both alike.

// luaBatch is prepended to the scripts that pass a list to one command:
// Lua's unpack fails past a few thousand values, so it goes in slices of
// 1000 (an even number, so that score-member pairs stay together).
const luaBatch = `
local function batch(cmd, key, args)
	for i = 1, #args, 1000 do
		redis.call(cmd, key, unpack(args, i, math.min(i + 999, #args)))
	end
end
`

// claimScript claims up to limit members: first those whose lease expired,
// then those due by now, lowest score first; each is leased until the given
// expiry. Expired members past the limit go back to due, scored with their
// lease expiry, which is when they became due again, so that Next sees
// them. Attempts are kept. Up to notifyTrim members that went to notify
// before the cutoff leave it: a few at a time, so that the day after a
// database outage that gave up on a million orders does not hold Redis
// for a second in one script.
//
//	KEYS: due, processing, seeded, notify
//	ARGV: now ms, lease expiry ms, limit, notify cutoff ms
//	returns {seeded 0|1, {member...}}
var claimScript = goredis.NewScript(luaBatch + `
local now, expiry, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local out, back = {}, {}
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'WITHSCORES')
for i = 1, #expired, 2 do
	if #out < limit then
		out[#out + 1] = expired[i]
	else
		back[#back + 1] = expired[i + 1]
		back[#back + 1] = expired[i]
	end
end
if #back > 0 then
	local members = {}
	for i = 2, #back, 2 do members[#members + 1] = back[i] end
	batch('ZREM', KEYS[2], members)
	batch('ZADD', KEYS[1], back)
end
if #out < limit then
	local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit - #out)
	if #due > 0 then
		batch('ZREM', KEYS[1], due)
		for _, m in ipairs(due) do out[#out + 1] = m end
	end
end
if #out > 0 then
	local leased = {}
	for _, m in ipairs(out) do
		leased[#leased + 1] = expiry
		leased[#leased + 1] = m
	end
	batch('ZADD', KEYS[2], leased)
end
local stale = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[4], 'LIMIT', 0, ` + notifyTrim + `)
if #stale > 0 then
	redis.call('ZREM', KEYS[4], unpack(stale))
end
return {redis.call('EXISTS', KEYS[3]), out}
`)

// notifyTrim bounds the members one claim takes out of notify.
const notifyTrim = "1000"

// doneScript forgets members: out of processing, attempts gone.
//
//	KEYS: processing, attempts
//	ARGV: member...
var doneScript = goredis.NewScript(luaBatch + `
batch('ZREM', KEYS[1], ARGV)
batch('HDEL', KEYS[2], ARGV)
return 0
`)

// retryScript is seed 000's retry: it counts an attempt of a member in
// processing and takes it out; the member is due again at the time given
// for that attempt or, past the last, goes to notify and its count is
// dropped. A member not in processing (finished, or moved by Add since it
// was claimed) is left alone, so that a late retry cannot put back an
// earlier time over a deadline that was moved.
//
//	KEYS: due, processing, attempts, notify
//	ARGV: member, now ms, due ms of attempt 1, of attempt 2, ...
//	returns {attempt, notified 0|1}, {0, 0} when not in processing
var retryScript = goredis.NewScript(`
local member = ARGV[1]
if redis.call('ZREM', KEYS[2], member) == 0 then
	return {0, 0}
end
local attempt = redis.call('HINCRBY', KEYS[3], member, 1)
if attempt > #ARGV - 2 then
	redis.call('HDEL', KEYS[3], member)
	redis.call('ZADD', KEYS[4], ARGV[2], member)
	return {attempt, 1}
end
redis.call('ZADD', KEYS[1], ARGV[2 + attempt], member)
return {attempt, 0}
`)

// releaseScript puts members that are still in processing back due at
// now; attempts are kept. One that is not (done, or moved by Add since it
// was claimed) is left alone, as retryScript leaves it.
//
//	KEYS: due, processing
//	ARGV: now ms, member...
var releaseScript = goredis.NewScript(`
for i = 2, #ARGV do
	if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then
		redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i])
	end
end
return 0
`)

// markScript ends a seed: it sets the seeded marker if the key of the
// seed is still there, and deletes that key. Gone, Redis lost its data
// during the seed, and the members added before the loss with it.
//
//	KEYS: seeded, the seed's key
//	returns 1 when marked, 0 when the seed's key was gone
var markScript = goredis.NewScript(`
if redis.call('DEL', KEYS[2]) == 0 then
	return 0
end
redis.call('SET', KEYS[1], '1')
return 1
`)

// addScript sets due times, but never later than the time a member has
// already (ZADD LT and ZMSCORE, Redis 6.2): the writes of one order's
// deadlines reach Redis in no set order (two processes change it; a seed
// adds the page it read before a change that another process has added
// since), and a later time kept over an earlier one would close the order
// late. An earlier time than the order's is harmless: the engine checks
// the database, and puts a member claimed before its order is due back at
// the order's deadline (requeueScript). A member in processing, whose
// deadline moved while it was claimed, leaves it, so that the claim's
// Done, Retry or Release leaves the new time alone; its attempts are kept.
// Its time is then the earlier of the one given and its lease expiry, when
// it would have been due again: a stale later time must not keep it from
// coming due if the process that claimed it fails.
//
//	KEYS: due, processing
//	ARGV: due ms, member, due ms, member, ...
var addScript = goredis.NewScript(luaBatch + `
local members = {}
for i = 2, #ARGV, 2 do members[#members + 1] = ARGV[i] end
local args = {}
for i = 1, #members, 1000 do
	local last = math.min(i + 999, #members)
	local leases = redis.call('ZMSCORE', KEYS[2], unpack(members, i, last))
	for k = i, last do
		local at, lease = ARGV[2 * k - 1], leases[k - i + 1]
		if lease and tonumber(lease) < tonumber(at) then at = lease end
		args[#args + 1] = at
		args[#args + 1] = members[k]
	end
end
batch('ZREM', KEYS[2], members)
for i = 1, #args, 1000 do
	redis.call('ZADD', KEYS[1], 'LT', unpack(args, i, math.min(i + 999, #args)))
end
return 0
`)

// requeueScript puts members that are still in processing back due, each
// at its own time: the engine's hand-back of members claimed before their
// orders were due, at their orders' deadlines, which may be later than the
// lease, as Add would not put them. Attempts are kept. One that is not in
// processing (done, or moved by Add since it was claimed) is left alone,
// as releaseScript leaves it.
//
//	KEYS: due, processing
//	ARGV: due ms, member, due ms, member, ...
var requeueScript = goredis.NewScript(`
for i = 1, #ARGV, 2 do
	if redis.call('ZREM', KEYS[2], ARGV[i + 1]) == 1 then
		redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1])
	end
end
return 0
`)
