package clientaddr

import (
	"net/http"
	"testing"
)

func TestOf(t *testing.T) {
	trusted, err := ParseTrusted([]string{"10.0.0.0/8", " ::1 ", "192.168.1.7"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		trusted bool
		peer    string
		xff     []string
		want    string
	}{
		{"no proxies trusted: the peer, whatever the header", false, "10.1.2.3:5000", []string{"203.0.113.9"}, "10.1.2.3"},
		{"an untrusted peer: its own address, the header ignored", true, "198.51.100.4:5000", []string{"203.0.113.9"}, "198.51.100.4"},
		{"a trusted proxy: the address it recorded", true, "10.1.2.3:5000", []string{"203.0.113.9"}, "203.0.113.9"},
		{"what the client wrote before the proxies is not believed", true, "10.1.2.3:5000", []string{"1.2.3.4, 203.0.113.9"}, "203.0.113.9"},
		{"two trusted proxies, two headers", true, "[::1]:5000", []string{"1.2.3.4, 203.0.113.9", "10.9.9.9"}, "203.0.113.9"},
		{"a single trusted address", true, "192.168.1.7:80", []string{"2001:db8::5"}, "2001:db8::5"},
		{"a neighbour of the trusted address is not trusted", true, "192.168.1.8:80", []string{"203.0.113.9"}, "192.168.1.8"},
		{"no header: the proxy", true, "10.1.2.3:5000", nil, "10.1.2.3"},
		{"garbage in the header stops the walk", true, "10.1.2.3:5000", []string{"203.0.113.9, junk"}, "10.1.2.3"},
		{"all trusted: the first of them", true, "10.1.2.3:5000", []string{"10.4.4.4, 10.5.5.5"}, "10.4.4.4"},
		{"a mapped IPv4 proxy", true, "[::ffff:10.1.2.3]:5000", []string{"203.0.113.9"}, "203.0.113.9"},
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.peer
		for _, v := range tt.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		tr := trusted
		if !tt.trusted {
			tr = nil
		}
		if got := Of(r, tr); got != tt.want {
			t.Errorf("%s: Of = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestParseTrustedRefuses(t *testing.T) {
	for _, bad := range []string{"10.0.0.0/33", "example.com", "fe80::1%eth0", "10.0.0"} {
		if _, err := ParseTrusted([]string{bad}); err == nil {
			t.Errorf("ParseTrusted(%q) = nil error, want one", bad)
		}
	}
}
