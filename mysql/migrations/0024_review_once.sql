-- An open review is one per order, delivery and reason: the same thing said
-- again, even by two reports at once, stands on the desk once. Its insert
-- does nothing (ON DUPLICATE KEY UPDATE of nothing) when an open review says
-- it already. MySQL has no partial index: open_key, a digest of the three,
-- is NULL once the review is resolved, and NULLs never clash.
-- Open duplicates that an earlier Lapse wrote are resolved first, each
-- noting the review it repeats, which stays open. They are found by that
-- digest, the key they would clash on, not by reason: reason is TEXT, whose
-- = and GROUP BY would take 'said ' for 'said' (PAD SPACE) and compare no
-- more than max_sort_length bytes of it.
UPDATE reviews r
JOIN (SELECT UNHEX(SHA2(CONCAT_WS(':', order_id, IFNULL(delivery_id, 0), reason), 256)) AS digest, MIN(id) AS keep
    FROM reviews WHERE resolved_at IS NULL GROUP BY digest HAVING COUNT(*) > 1) k
    ON UNHEX(SHA2(CONCAT_WS(':', r.order_id, IFNULL(r.delivery_id, 0), r.reason), 256)) = k.digest
SET r.resolved_at = CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), r.resolved_by = 'lapse migration 0024',
    r.note = CONCAT('the same as review ', k.keep, ', which stays open')
WHERE r.resolved_at IS NULL AND r.id <> k.keep;
ALTER TABLE reviews
    ADD COLUMN open_key BINARY(32) AS (IF(resolved_at IS NULL,
        UNHEX(SHA2(CONCAT_WS(':', order_id, IFNULL(delivery_id, 0), reason), 256)), NULL)) STORED,
    ADD CONSTRAINT reviews_open_once_key UNIQUE (open_key);

-- A group member's charge found by its provider's transaction: a callback
-- that carries it is about that charge, whatever order it names.
CREATE INDEX group_members_txn_idx ON group_members (provider, txn_id);

-- What the provider reports it took by a member's transaction
-- (lapse.GroupMember.CapturedAmount): a charge of what Lapse did not ask
-- for fails the member, and is money in review all the same.
ALTER TABLE group_members
    ADD COLUMN captured_amount BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN captured_currency VARBINARY(1024) NOT NULL DEFAULT '';
