-- An open review is one per order, delivery and reason: the same thing said
-- again, even by two reports at once, stands on the desk once. Its insert
-- does nothing (ON CONFLICT DO NOTHING) when an open review says it already.
-- Open duplicates that an earlier Lapse wrote are resolved first, each
-- noting the review it repeats, which stays open.
UPDATE reviews SET resolved_at = CAST(strftime('%s', 'now') AS INTEGER) * 1000000,
	resolved_by = 'lapse migration 0028',
	note = 'the same as review ' || (SELECT min(k.id) FROM reviews k WHERE k.resolved_at IS NULL
		AND k.order_id = reviews.order_id AND ifnull(k.delivery_id, 0) = ifnull(reviews.delivery_id, 0)
		AND k.reason = reviews.reason) || ', which stays open'
WHERE resolved_at IS NULL AND id > (SELECT min(k.id) FROM reviews k WHERE k.resolved_at IS NULL
	AND k.order_id = reviews.order_id AND ifnull(k.delivery_id, 0) = ifnull(reviews.delivery_id, 0)
	AND k.reason = reviews.reason);
CREATE UNIQUE INDEX IF NOT EXISTS reviews_open_once_key ON reviews (order_id, ifnull(delivery_id, 0), reason)
	WHERE resolved_at IS NULL;

-- A group member's charge found by its provider's transaction: a callback
-- that carries it is about that charge, whatever order it names.
CREATE INDEX IF NOT EXISTS group_members_txn_idx ON group_members (provider, txn_id) WHERE txn_id <> '';

-- What the provider reports it took by a member's transaction
-- (lapse.GroupMember.CapturedAmount): a charge of what Lapse did not ask
-- for fails the member, and is money in review all the same.
ALTER TABLE group_members ADD COLUMN captured_amount INTEGER NOT NULL DEFAULT 0;
ALTER TABLE group_members ADD COLUMN captured_currency TEXT NOT NULL DEFAULT '';
