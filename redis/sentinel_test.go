package redis_test

import (
	"slices"
	"testing"
	"time"

	"github.com/lapsehq/lapse/redis"
)

// TestSentinelURL: a URL with master_name names the Sentinels of a master
// (goredis.ParseFailoverURL's form); one without names a single server.
func TestSentinelURL(t *testing.T) {
	t.Parallel()
	url := "redis://sentuser:sentpw@10.0.0.1:26379/2?master_name=lapse&addr=10.0.0.2:26380&addr=10.0.0.3:26381&password=masterpw"
	if !redis.IsSentinelURL(url) {
		t.Fatalf("IsSentinelURL(%s) = false", url)
	}
	opt, err := redis.FailoverOptions(url, 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if opt.MasterName != "lapse" || opt.DB != 2 || opt.Password != "masterpw" ||
		opt.SentinelUsername != "sentuser" || opt.SentinelPassword != "sentpw" ||
		!slices.Equal(opt.SentinelAddrs, []string{"10.0.0.1:26379", "10.0.0.2:26380", "10.0.0.3:26381"}) {
		t.Errorf("FailoverOptions(%s) = %+v", url, opt)
	}
	if opt.DialTimeout != 150*time.Millisecond || opt.ReadTimeout != 150*time.Millisecond || opt.WriteTimeout != 150*time.Millisecond ||
		opt.PoolTimeout != 150*time.Millisecond || opt.MaxRetries != -1 || !opt.ContextTimeoutEnabled {
		t.Errorf("the timeout and retries are not the trigger's: %+v", opt)
	}
	if opt, err := redis.FailoverOptions("redis://10.0.0.1:26379?master_name=lapse&db=3", time.Second); err != nil || opt.DB != 3 {
		t.Errorf("db as a parameter: %+v, %v", opt, err)
	}

	for _, plain := range []string{"redis://127.0.0.1:6379/0", "redis://:pw@host:6379/1?dial_timeout=1s", "::"} {
		if redis.IsSentinelURL(plain) {
			t.Errorf("IsSentinelURL(%s) = true", plain)
		}
	}
	for _, bad := range []string{
		"redis://10.0.0.1:26379?master_name=",                  // no master
		"redis://10.0.0.1:26379?master_name=lapse&addr=nohost", // an addr without a port
		"redis://10.0.0.1:26379?master_name=lapse&sentinels=x", // an unknown parameter
		"http://10.0.0.1:26379?master_name=lapse",              // not redis
		"redis://10.0.0.1:26379/zero?master_name=lapse",        // not a database number
	} {
		if _, err := redis.New(redis.Config{URL: bad}); err == nil {
			t.Errorf("New(%s) succeeded", bad)
		}
	}
	tr, err := redis.New(redis.Config{URL: url})
	if err != nil {
		t.Fatalf("New(%s): %v", url, err)
	}
	tr.Close()
}
