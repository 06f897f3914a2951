package console

// MaxQueueReviews is how many open reviews the queue reads at once.
const MaxQueueReviews = maxQueueReviews

// PageAccess is who may use a page of the console, as its route table says.
type PageAccess struct {
	Open  bool   // served without a session
	Scope string // what the operator's role must grant ("-": any role)
	Audit bool   // a post of it is in the audit log
}

// Pages maps each page's pattern to its PageAccess, so that the access
// test can call every page.
func Pages() map[string]PageAccess {
	out := map[string]PageAccess{}
	for _, p := range routes() {
		scope := p.scope
		if scope == "" && !p.open {
			scope = "orders:read"
		}
		out[p.pattern] = PageAccess{Open: p.open, Scope: scope, Audit: p.audit != nil}
	}
	return out
}
