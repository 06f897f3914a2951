package engine

// FillTriggerQueue fills the queue of the deadlines this process hands to
// the shared trigger, as a burst of orders would, with one that names no
// order: the next deadline set finds it full.
func (e *Engine) FillTriggerQueue() {
	for len(e.trig.pending) < cap(e.trig.pending) {
		e.trig.pending <- TriggerDue{OrderID: -1, At: e.clock.Now()}
	}
}

// LegacyChargeKey is the charge key a member was given before its
// database had a salt.
func LegacyChargeKey(groupID, userID string) string { return legacyChargeKey(groupID, userID) }
