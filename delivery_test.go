package lapse_test

import (
	"slices"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

func TestScheduleNext(t *testing.T) {
	stepped := lapse.Schedule{Steps: []time.Duration{time.Minute, 5 * time.Minute, time.Hour}}
	for _, c := range []struct {
		failures int
		want     time.Duration
		more     bool
	}{{1, time.Minute, true}, {2, 5 * time.Minute, true}, {3, time.Hour, true}, {4, 0, false}} {
		if got, more := stepped.Next(c.failures, 0.5); got != c.want || more != c.more {
			t.Errorf("stepped.Next(%d) = %v, %v; want %v, %v", c.failures, got, more, c.want, c.more)
		}
	}
	exp := lapse.Schedule{Base: time.Second, Cap: 10 * time.Second, MaxAttempts: 6}
	var waits []time.Duration
	for f := 1; ; f++ {
		d, more := exp.Next(f, 0.5)
		if !more {
			break
		}
		waits = append(waits, d)
	}
	if want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second}; !slices.Equal(waits, want) {
		t.Errorf("exponential waits = %v, want %v", waits, want)
	}
	jit := lapse.Schedule{Steps: []time.Duration{10 * time.Second}, Jitter: 0.2}
	lo, _ := jit.Next(1, 0)
	hi, _ := jit.Next(1, 0.999999)
	if lo != 8*time.Second || hi < 11900*time.Millisecond || hi > 12*time.Second {
		t.Errorf("jitter range [%v, %v], want [8s, 12s)", lo, hi)
	}
	huge := lapse.Schedule{Base: time.Second, MaxAttempts: 1000}
	if d, _ := huge.Next(500, 0.5); d <= 0 || d > 14*24*time.Hour {
		t.Errorf("an uncapped schedule waits %v after 500 failures", d)
	}
}

func TestParseSchedule(t *testing.T) {
	s, err := lapse.ParseSchedule("1m, 5m,15m,30m,1h")
	if err != nil || len(s.Steps) != 5 || s.Steps[4] != time.Hour || s.Jitter != 0.1 {
		t.Errorf("stepped = %+v, %v", s, err)
	}
	s, err = lapse.ParseSchedule("exp:1s,5m,12")
	if err != nil || s.Base != time.Second || s.Cap != 5*time.Minute || s.MaxAttempts != 12 {
		t.Errorf("exp = %+v, %v", s, err)
	}
	for _, bad := range []string{"", "1m,,5m", "-1s", "exp:1s,5m", "exp:0s,5m,3", "exp:1m,1s,3", "exp:1s,5m,0", "soon",
		"106751d", "1m,100000d", "exp:106751d,0,5", "exp:1s,106751d,5"} {
		if _, err := lapse.ParseSchedule(bad); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("ParseSchedule(%q) = %v, want invalid", bad, err)
		}
	}
}

// TestScheduleLongWaits: the longest wait a schedule may name comes out,
// with its jitter at either extreme, as a wait ahead, never one that
// overflowed into the past (a retry due at once, and Longest zero); a
// longer one is refused.
func TestScheduleLongWaits(t *testing.T) {
	for _, s := range []lapse.Schedule{
		{Steps: []time.Duration{lapse.MaxScheduleWait}, Jitter: 0.999},
		{Base: lapse.MaxScheduleWait, MaxAttempts: 5, Jitter: 0.999},
		{Base: time.Second, Cap: lapse.MaxScheduleWait, MaxAttempts: 80, Jitter: 0.999},
	} {
		if err := s.Validate(); err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		for _, r := range []float64{0, 0.999999} {
			if d, _ := s.Next(1, r); d <= 0 {
				t.Errorf("%+v: Next(1, %v) = %v, want a wait ahead", s, r, d)
			}
		}
		if l := s.Longest(); l < lapse.MaxScheduleWait/100 {
			t.Errorf("%+v: Longest() = %v", s, l)
		}
	}
	for _, s := range []lapse.Schedule{
		{Steps: []time.Duration{lapse.MaxScheduleWait + 1}},
		{Base: lapse.MaxScheduleWait + 1, MaxAttempts: 2},
		{Base: time.Second, Cap: lapse.MaxScheduleWait + 1, MaxAttempts: 2},
	} {
		if err := s.Validate(); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("%+v: Validate = %v, want EINVALID", s, err)
		}
	}
}

func TestDeliveryRenewLost(t *testing.T) {
	p := &lapse.DeliveryRenewParams{Owner: "w", Leases: []lapse.DeliveryLease{{ID: 3, Attempt: 1}, {ID: 1, Attempt: 2}, {ID: 2, Attempt: 1}}}
	if got := p.Lost([]int64{2}); !slices.Equal(got, []int64{3, 1}) {
		t.Errorf("Lost = %v, want [3 1], in the order of the leases", got)
	}
	if got := p.Lost([]int64{1, 2, 3}); got != nil {
		t.Errorf("Lost with every lease renewed = %v, want none", got)
	}
}

func TestDeliveryDoneManyValidate(t *testing.T) {
	ok := func(id int64) lapse.DeliveryAttempt {
		return lapse.DeliveryAttempt{DeliveryID: id, Attempt: 1, Worker: "w", Outcome: lapse.OutcomeOK}
	}
	applied := ok(2)
	applied.Outcome = lapse.OutcomeApplied
	if err := (&lapse.DeliveryDoneManyParams{Owner: "w", Attempts: []lapse.DeliveryAttempt{ok(1), applied}}).Validate(); err != nil {
		t.Errorf("valid batch: %v", err)
	}
	failed := ok(2)
	failed.Outcome = lapse.OutcomeError
	noAttempt := ok(2)
	noAttempt.Attempt = 0
	for name, p := range map[string]*lapse.DeliveryDoneManyParams{
		"no owner":   {Attempts: []lapse.DeliveryAttempt{ok(1)}},
		"failed":     {Owner: "w", Attempts: []lapse.DeliveryAttempt{ok(1), failed}},
		"no attempt": {Owner: "w", Attempts: []lapse.DeliveryAttempt{noAttempt}},
		"twice":      {Owner: "w", Attempts: []lapse.DeliveryAttempt{ok(1), ok(1)}},
	} {
		if err := p.Validate(); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("%s: Validate = %v, want EINVALID", name, err)
		}
	}
}

func TestScheduleLongest(t *testing.T) {
	for _, c := range []struct {
		s    lapse.Schedule
		want time.Duration
	}{
		{lapse.Schedule{Steps: []time.Duration{time.Minute, 3 * time.Hour, time.Hour}}, 3 * time.Hour},
		{lapse.Schedule{Steps: []time.Duration{time.Hour}, Jitter: 0.1}, 66 * time.Minute},
		{lapse.Schedule{Base: time.Second, Cap: time.Minute, MaxAttempts: 30, Jitter: 0.1}, 66 * time.Second},
		{lapse.Schedule{Base: time.Second, Cap: time.Hour, MaxAttempts: 4}, 4 * time.Second},
		{lapse.Schedule{Base: time.Second, MaxAttempts: 1}, 0},
		{lapse.Schedule{Base: time.Hour, MaxAttempts: 1000}, 256 * time.Hour},
	} {
		if got := c.s.Longest(); got != c.want {
			t.Errorf("%+v: Longest() = %v, want %v", c.s, got, c.want)
		}
	}
}

func TestScheduleAttempts(t *testing.T) {
	if n := lapse.DefaultSchedule().Attempts(); n != 6 {
		t.Errorf("the default schedule allows %d attempts, want 6", n)
	}
	if n := (lapse.Schedule{Base: time.Second, MaxAttempts: 4}).Attempts(); n != 4 {
		t.Errorf("exp with 4 attempts allows %d", n)
	}
}
