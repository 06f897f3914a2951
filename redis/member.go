package redis

// A member of the trigger's sets names an order by its database id, not its
// order number: an order number may be 64 bytes long, an id fits in a few,
// and what a member costs Redis depends on its length. A large zset keeps
// each member as a string (an integer too: only small zsets, in a listpack,
// store integers as such) beside a skiplist node and a dict entry of fixed
// size, and the allocator rounds the string up to 8, 16, 32 or 48 bytes.
// So a decimal id of 7 to 14 digits takes the 16-byte class, and a binary
// id below 2^47 the 8-byte one. Measured on Redis 7.0 (MEMORY USAGE of the
// due set, 100,000 members): 95.8 bytes per order with these members, 103.9
// with decimal ids, 103.8, 119.8 and 135.8 with order numbers of 12, 24 and
// 32 bytes (TestMemoryPerMember); 109.3 with these members just after the
// set's hash table doubled, until Redis has moved it over (65,600 members). Redis's used_memory grows by 8 bytes more
// per member than MEMORY USAGE counts (the allocator rounds each 24-byte
// dict entry up to 32): 103.8 with these members, 111.9 with decimal ids.
//
// The encoding is the id's big-endian bytes, as few as leave the first
// byte's top bit clear, with that bit then set. It is one to one (the length
// and the bits tell the id back), and its first byte is never a letter or a
// digit, so that no member is ever the order number that a member written
// by an earlier version of Lapse (which named orders so) may be: during an
// upgrade both kinds share the sets without one overwriting the other. The
// engine treats every member alike, as a sign that something may be due,
// and asks the trigger for the ids of those it claimed (OrderID) to know
// where in the deadline index to read from; a member that names none sends
// it to the start.

// OrderID returns the database id of the order that m names, and false for
// a member that is no id's (an order number of an earlier version).
func (t *Trigger) OrderID(m string) (int64, bool) { return memberID(m) }

// memberID decodes member: the id of m, and false for a string that member
// never returns.
func memberID(m string) (int64, bool) {
	if len(m) == 0 || len(m) > 9 || m[0]&0x80 == 0 {
		return 0, false
	}
	v := uint64(m[0] &^ 0x80)
	for i := 1; i < len(m); i++ {
		v = v<<8 | uint64(m[i])
	}
	if member(int64(v)) != m {
		return 0, false // not the shortest form: no id's member
	}
	return int64(v), true
}

// member is the trigger's name for the order with database id id.
func member(id int64) string {
	v := uint64(id)
	n := 1
	for n < 9 && v>>(8*n-1) != 0 {
		n++
	}
	var b [9]byte
	for i := n - 1; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	b[0] |= 0x80
	return string(b[:n])
}
