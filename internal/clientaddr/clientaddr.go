// Package clientaddr tells the address of the client a request came from:
// the connection's peer, or, when that peer is a proxy the service was told
// to trust, the address the proxies recorded in X-Forwarded-For. The limits
// and the audit log that key on a client's address need the client's, not
// the proxy's, which every client behind it shares.
package clientaddr

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ParseTrusted parses proxies, each an address (10.0.0.7, ::1) or a network
// (10.0.0.0/8, fd00::/8), into the prefixes Of trusts.
func ParseTrusted(proxies []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range proxies {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%q is neither an IP address nor a network such as 10.0.0.0/8", s)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// Of returns the address of r's client. It is the connection's peer unless
// the peer is in trusted: then X-Forwarded-For (all its headers, in order)
// is read from its end, each proxy having appended the address it was
// reached from, past the trusted proxies, and the first address that is
// not one of them is the client. A list that is all trusted proxies gives
// the first of them; one with an entry that is not an address gives the
// last trusted address before it, so that what a client wrote into the
// header itself is never believed.
func Of(r *http.Request, trusted []netip.Prefix) string {
	peer := r.RemoteAddr
	if host, _, err := net.SplitHostPort(peer); err == nil {
		peer = host
	}
	a, err := netip.ParseAddr(peer)
	if len(trusted) == 0 || err != nil || !contains(trusted, a) {
		return peer
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	client := a
	for i := len(hops) - 1; i >= 0; i-- {
		h, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil || h.Zone() != "" {
			break
		}
		client = h.Unmap()
		if !contains(trusted, client) {
			break
		}
	}
	return client.String()
}

func contains(trusted []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
