package redis

import (
	"math"
	"testing"
)

// TestMember: a member tells its id back (memberID), is as short as the id
// allows (six bytes below 2^47, which keeps it in Redis's smallest string
// class), and never starts as an order number does, with a letter or a
// digit; memberID names no id for a string member never writes.
func TestMember(t *testing.T) {
	t.Parallel()
	var ids []int64
	for k := range 64 {
		p := int64(uint64(1) << k)
		ids = append(ids, p-1, p, p+1, -p)
	}
	ids = append(ids, math.MaxInt64, math.MinInt64, 12345678, 10_000_000)
	seen := map[string]int64{}
	for _, id := range ids {
		m := member(id)
		if got, ok := memberID(m); !ok || got != id {
			t.Errorf("member(%d) = %q, which reads back as %d, %v", id, m, got, ok)
		}
		if c := m[0]; c < 0x80 {
			t.Errorf("member(%d) = %q starts with %q", id, m, c)
		}
		want := 9
		for n := 1; n < 9; n++ {
			if id >= 0 && uint64(id) < uint64(1)<<(8*n-1) {
				want = n
				break
			}
		}
		if len(m) != want {
			t.Errorf("member(%d) is %d bytes, want %d", id, len(m), want)
		}
		if prev, ok := seen[m]; ok && prev != id {
			t.Errorf("member(%d) = member(%d) = %q", id, prev, m)
		}
		seen[m] = id
	}
	if n := len(member(1<<47 - 1)); n != 6 {
		t.Errorf("member(2^47-1) is %d bytes, want 6", n)
	}
	for id := range int64(1 << 16) {
		m := member(id)
		if prev, ok := seen[m]; ok && prev != id {
			t.Errorf("member(%d) = member(%d) = %q", id, prev, m)
		}
		seen[m] = id
	}
	for _, m := range []string{"", "A-1", "12345678", "\x80\x01", "\x00", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"} {
		if id, ok := memberID(m); ok {
			t.Errorf("memberID(%q) = %d; want no id", m, id)
		}
	}
}
