-- An open review is one per order, delivery and reason: the same thing said
-- again, even by two reports at once, stands on the desk once. Its insert
-- does nothing (ON CONFLICT DO NOTHING) when an open review says it already.
-- Reasons are kept short (lapse.MaxReasonLen), so the key holds them whole.
-- Open duplicates that an earlier Lapse wrote are resolved first, each
-- noting the review it repeats, which stays open.
UPDATE reviews r SET resolved_at = now(), resolved_by = 'lapse migration 0030',
	note = 'the same as review ' || k.keep || ', which stays open'
FROM (SELECT id, min(id) OVER (PARTITION BY order_id, coalesce(delivery_id, 0), reason) AS keep
	FROM reviews WHERE resolved_at IS NULL) k
WHERE r.id = k.id AND k.id <> k.keep;
CREATE UNIQUE INDEX reviews_open_once_key ON reviews (order_id, coalesce(delivery_id, 0), reason)
	WHERE resolved_at IS NULL;

-- A group member's charge found by its provider's transaction: a callback
-- that carries it is about that charge, whatever order it names.
CREATE INDEX group_members_txn_idx ON group_members (provider, txn_id) WHERE txn_id <> '';

-- What the provider reports it took by a member's transaction
-- (lapse.GroupMember.CapturedAmount): a charge of what Lapse did not ask
-- for fails the member, and is money in review all the same.
ALTER TABLE group_members ADD COLUMN captured_amount bigint NOT NULL DEFAULT 0,
	ADD COLUMN captured_currency text NOT NULL DEFAULT '';
